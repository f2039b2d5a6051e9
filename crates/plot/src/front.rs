//! A search's candidates as a scatter of cost against one figure, the front of those no
//! other beats on both drawn as a line through them, and the winner ringed.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::{PlotError, tick, write_svg};

/// The file [`write_front`] writes.
pub const FRONT: &str = "front.svg";

/// One candidate on the plot.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FrontPoint {
    /// Its cost.
    pub cost: f64,
    /// The figure it is judged by.
    pub value: f64,
    /// No other candidate is at least as good on both and better on one.
    pub on_front: bool,
    /// The one ranked first.
    pub winner: bool,
}

/// Writes the front plot into `dir`: `cost` and `value` name the axes.
pub fn write_front(
    dir: &Path,
    points: &[FrontPoint],
    cost: &str,
    value: &str,
) -> Result<PathBuf, PlotError> {
    write_svg(dir, FRONT, (900, 560), |root| {
        let range = |f: fn(&FrontPoint) -> f64| {
            let lo = points.iter().map(f).fold(f64::INFINITY, f64::min);
            let hi = points.iter().map(f).fold(f64::NEG_INFINITY, f64::max);
            if lo.is_finite() && hi > lo {
                let pad = (hi - lo) * 0.05;
                (lo - pad)..(hi + pad)
            } else if lo.is_finite() {
                (lo - 1.0)..(lo + 1.0)
            } else {
                0.0..1.0
            }
        };
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!("Candidates: {value} against {cost}"),
                ("sans-serif", 22),
            )
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(range(|p| p.cost), range(|p| p.value))?;
        chart
            .configure_mesh()
            .x_desc(cost)
            .y_desc(value)
            .x_label_formatter(&|v| tick(*v))
            .y_label_formatter(&|v| tick(*v))
            .draw()?;
        let grey = RGBColor(170, 170, 170);
        chart
            .draw_series(
                points
                    .iter()
                    .filter(|p| !p.on_front)
                    .map(|p| Circle::new((p.cost, p.value), 3, grey.filled())),
            )?
            .label("a candidate")
            .legend(move |(x, y)| Circle::new((x + 10, y), 3, grey.filled()));
        let blue = RGBColor(31, 119, 180);
        let mut front: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| p.on_front)
            .map(|p| (p.cost, p.value))
            .collect();
        front.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
        chart.draw_series(LineSeries::new(front.iter().copied(), blue.stroke_width(2)))?;
        chart
            .draw_series(front.iter().map(|&p| Circle::new(p, 5, blue.filled())))?
            .label("on the front")
            .legend(move |(x, y)| Circle::new((x + 10, y), 5, blue.filled()));
        let red = RGBColor(214, 39, 40);
        chart
            .draw_series(
                points
                    .iter()
                    .filter(|p| p.winner)
                    .map(|p| Circle::new((p.cost, p.value), 9, red.stroke_width(2))),
            )?
            .label("ranked first")
            .legend(move |(x, y)| Circle::new((x + 10, y), 7, red.stroke_width(2)));
        // The key goes in the right-hand corner with fewer points under it.
        let (x, y) = (range(|p| p.cost), range(|p| p.value));
        let right = |p: &&FrontPoint| p.cost > x.start + (x.end - x.start) * 0.6;
        let high = |p: &&FrontPoint| p.value > y.start + (y.end - y.start) * 0.5;
        let upper = points.iter().filter(right).filter(high).count();
        let lower = points.iter().filter(right).filter(|p| !high(p)).count();
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .position(if upper <= lower {
                SeriesLabelPosition::UpperRight
            } else {
                SeriesLabelPosition::LowerRight
            })
            .draw()?;
        Ok(())
    })
}
