//! What sharing state buys router replicas: per replica count, the hit ratio, TTFT p50 and
//! imbalance of each run against how stale its replicas' picture of each other was (the
//! report's mean lag), with the replicas alone drawn as a dashed level.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::{PlotError, colour, tick, write_svg};

/// The file [`write_sync`] writes.
pub const SYNC: &str = "sync.svg";

/// One run of a sweep over replica sync settings.
#[derive(Debug, Clone, PartialEq)]
pub struct SyncPoint {
    /// Its router replicas.
    pub replicas: u64,
    /// Mean time from a change to its arrival at a peer, ms; `None`: the replicas alone.
    pub lag_ms: Option<f64>,
    /// Engine prefix-cache hit ratio.
    pub hit_ratio: f64,
    /// Median time to first token, ms.
    pub ttft_p50_ms: f64,
    /// Requests of the busiest endpoint over the mean.
    pub imbalance: f64,
}

/// One panel: its name and the figure it draws.
type Panel = (&'static str, fn(&SyncPoint) -> f64);

/// Writes the three panels (hit ratio, TTFT p50, imbalance against staleness) into `dir`.
pub fn write_sync(dir: &Path, points: &[SyncPoint]) -> Result<PathBuf, PlotError> {
    let mut counts: Vec<u64> = points.iter().map(|p| p.replicas).collect();
    counts.sort_unstable();
    counts.dedup();
    let max_lag = (points.iter().filter_map(|p| p.lag_ms))
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.05;
    let panels: [Panel; 3] = [
        ("hit ratio", |p| p.hit_ratio),
        ("TTFT p50 (ms)", |p| p.ttft_p50_ms),
        ("busiest endpoint / mean", |p| p.imbalance),
    ];
    write_svg(dir, SYNC, (1350, 470), |root| {
        let (title, body) = root.split_vertically(40);
        let caption = match points.iter().any(|p| p.lag_ms.is_none()) {
            true => "What sharing state buys router replicas (dashed: each replica alone)",
            false => "What sharing state buys router replicas",
        };
        title.draw(&Text::new(caption, (16, 10), ("sans-serif", 22)))?;
        for (area, (name, value)) in body.split_evenly((1, 3)).iter().zip(panels) {
            let values: Vec<f64> = points.iter().map(value).collect();
            let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let pad = ((hi - lo) * 0.15).max(hi.abs() * 0.02).max(1e-3);
            // Room above for the key; enough decimals that ticks differ.
            let span = hi - lo + 4.0 * pad;
            let label = move |v: &f64| match span {
                s if s < 0.1 => format!("{v:.3}"),
                s if s < 2.0 => format!("{v:.2}"),
                _ => tick(*v),
            };
            let mut chart = ChartBuilder::on(area)
                .caption(name, ("sans-serif", 17))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(56)
                .build_cartesian_2d(0.0..max_lag, (lo - pad)..(hi + 3.0 * pad))?;
            chart
                .configure_mesh()
                .x_desc("staleness: mean lag of a peer's change (ms)")
                .x_label_formatter(&|v| tick(*v))
                .y_label_formatter(&label)
                .draw()?;
            for (i, &count) in counts.iter().enumerate() {
                let c = colour(i, counts.len());
                let mut line: Vec<(f64, f64)> = (points.iter())
                    .filter(|p| p.replicas == count)
                    .filter_map(|p| Some((p.lag_ms?, value(p))))
                    .collect();
                line.sort_by(|a, b| a.0.total_cmp(&b.0));
                chart
                    .draw_series(LineSeries::new(line.clone(), c.stroke_width(2)))?
                    .label(format!("{count} replicas"))
                    .legend(move |(x, y)| {
                        PathElement::new([(x, y), (x + 20, y)], c.stroke_width(2))
                    });
                chart.draw_series(line.iter().map(|&p| Circle::new(p, 4, c.filled())))?;
                for alone in (points.iter()).filter(|p| p.replicas == count && p.lag_ms.is_none()) {
                    let level = value(alone);
                    chart.draw_series(DashedLineSeries::new(
                        [(0.0, level), (max_lag, level)],
                        6,
                        4,
                        c.stroke_width(1),
                    ))?;
                }
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.9))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperRight)
                .draw()?;
        }
        Ok(())
    })
}
