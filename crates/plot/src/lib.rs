//! routerlab-plot: the pictures of a comparison, as SVG files.
//!
//! Tables say which policy won; pictures say why. A TTFT CDF shows where the tails part, a
//! panel of running requests per endpoint shows a hot spot at a glance, the queue over time
//! shows when it formed, and bars put the hit ratios side by side. Everything is drawn from
//! finished reports and per-request records, after the runs, so plotting never changes a
//! number. Each policy keeps one colour in every file. Files are rendered to memory and
//! written beside their final name, then renamed, so a failure leaves no half picture.

use std::fmt;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;
use routerlab_report::Report;
use routerlab_report::records::RequestRecord;
use serde::{Deserialize, Serialize};

mod front;
mod key;
mod scaling;
mod sync;

pub use front::{FRONT, FrontPoint, write_front};
pub use scaling::{SCALING, write_scaling};
pub use sync::{SYNC, SyncPoint, write_sync};

use key::{Marker, colour, marker};

/// One policy's part in the plots.
#[derive(Debug, Clone, Copy)]
pub struct Series<'a> {
    /// Its name in legends and titles.
    pub label: &'a str,
    /// Its report.
    pub report: &'a Report,
    /// Its curves over time (timed runs only).
    pub curves: Option<&'a Curves>,
}

/// What the time-based plots draw of one run, sampled from its finished requests: small
/// enough to travel with a report (a sweep's JSONL line carries it, so merged shards plot
/// exactly what the unsharded sweep plots).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Curves {
    /// TTFT CDF: (milliseconds, share of requests at or below), at most 601 points.
    pub ttft_cdf: Vec<(f64, f64)>,
    /// Per endpoint, in endpoint order: (seconds, running requests), 401 samples.
    pub running: Vec<Vec<(f64, f64)>>,
    /// (seconds, requests arrived and not yet scheduled), 601 samples.
    pub queue: Vec<(f64, f64)>,
}

impl Curves {
    /// Samples a run's finished requests; `endpoints` are its endpoint names in order.
    pub fn from_records(records: &[RequestRecord], endpoints: &[String]) -> Curves {
        let horizon = records
            .iter()
            .map(|r| r.finish_s)
            .fold(0.0f64, f64::max)
            .max(1e-3);
        let mut ttft: Vec<f64> = records.iter().map(|r| r.ttft_ms.max(0.1)).collect();
        ttft.sort_by(f64::total_cmp);
        let scheduled = |r: &RequestRecord| r.arrival_s + r.queue_ms / 1e3;
        let running = endpoints
            .iter()
            .map(|name| {
                let mut events: Vec<(f64, i64)> = records
                    .iter()
                    .filter(|r| r.endpoint.as_deref() == Some(name))
                    .flat_map(|r| [(scheduled(r), 1), (r.finish_s, -1)])
                    .collect();
                rounded(step_samples(&mut events, horizon, 400))
            })
            .collect();
        let mut waiting: Vec<(f64, i64)> = records
            .iter()
            .flat_map(|r| [(r.arrival_s, 1), (scheduled(r), -1)])
            .collect();
        Curves {
            ttft_cdf: rounded(cdf_points(&ttft, 600)),
            running,
            queue: rounded(step_samples(&mut waiting, horizon, 600)),
        }
    }

    /// The last time any curve reaches, seconds.
    fn horizon(&self) -> f64 {
        self.queue.last().map_or(0.0, |p| p.0)
    }
}

/// Points at six decimals, as reports are, so a curve reads back from JSON unchanged.
fn rounded(points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    let r = |x: f64| (x * 1e6).round() / 1e6;
    points.into_iter().map(|(x, y)| (r(x), r(y))).collect()
}

/// A plot could not be drawn or written.
#[derive(Debug)]
pub struct PlotError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub cause: String,
}

impl fmt::Display for PlotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: cannot write plot: {}",
            self.path.display(),
            self.cause
        )
    }
}

impl std::error::Error for PlotError {}

/// The files [`write_all`] writes, by what they show.
pub const TTFT_CDF: &str = "ttft-cdf.svg";
/// Running requests per endpoint over time, a panel per policy.
pub const RUNNING: &str = "running-per-endpoint.svg";
/// Requests waiting (arrived, not yet scheduled) over time.
pub const QUEUE: &str = "queue.svg";
/// Hit ratio, achieved/best hit and kv-optimal share, as bars.
pub const HITS: &str = "hit-ratios.svg";

/// Writes every plot the series support into `dir` (which must exist); returns the files.
/// Time-based plots need records, which only timed runs have.
pub fn write_all(dir: &Path, series: &[Series<'_>]) -> Result<Vec<PathBuf>, PlotError> {
    let mut written = Vec::new();
    let timed = series.iter().any(|s| s.curves.is_some());
    if timed {
        let horizon = series
            .iter()
            .filter_map(|s| s.curves.map(Curves::horizon))
            .fold(1e-3f64, f64::max);
        let key = key::layout(&labels(series), 900);
        written.push(write_svg(dir, TTFT_CDF, (900, 520 + key.height), |root| {
            ttft_cdf(root, series, &key)
        })?);
        let rows = series.len().div_ceil(2);
        written.push(write_svg(
            dir,
            RUNNING,
            (1100, 60 + 260 * rows as u32),
            |root| running(root, series, horizon),
        )?);
        written.push(write_svg(
            dir,
            QUEUE,
            (1100, 60 + 220 * rows as u32),
            |root| queue(root, series, horizon),
        )?);
    }
    let key = key::layout(&labels(series), 900);
    written.push(write_svg(dir, HITS, (900, 440 + key.height), |root| {
        hits(root, series, &key)
    })?);
    Ok(written)
}

/// The runs' names, in order.
fn labels<'a>(series: &[Series<'a>]) -> Vec<&'a str> {
    series.iter().map(|s| s.label).collect()
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// Renders one SVG to memory, then writes it beside `name` and renames it into place.
fn write_svg(
    dir: &Path,
    name: &str,
    size: (u32, u32),
    draw: impl FnOnce(&Area<'_>) -> DrawResult,
) -> Result<PathBuf, PlotError> {
    let path = dir.join(name);
    let fail = |cause: String| PlotError {
        path: path.clone(),
        cause,
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
        draw(&root).map_err(|e| fail(e.to_string()))?;
        root.present().map_err(|e| fail(e.to_string()))?;
    }
    let partial = dir.join(format!(".{name}.{}.partial", std::process::id()));
    std::fs::write(&partial, svg)
        .and_then(|()| std::fs::rename(&partial, &path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&partial);
            fail(e.to_string())
        })?;
    Ok(path)
}

/// An axis tick: whole numbers without decimals, thousands as `k`.
fn tick(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 && (v / 1e6).fract() == 0.0 {
        format!("{}M", v / 1e6)
    } else if a >= 1e4 && (v / 1e3).fract() == 0.0 {
        format!("{}k", v / 1e3)
    } else if v.fract() == 0.0 || a >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// At most `n` points of a sorted sample's CDF, evenly spaced in rank.
fn cdf_points(sorted: &[f64], n: usize) -> Vec<(f64, f64)> {
    if sorted.is_empty() {
        return Vec::new();
    }
    let step = sorted.len().div_ceil(n).max(1);
    let last = sorted.len() - 1;
    (0..sorted.len())
        .step_by(step)
        .chain([last])
        .map(|i| (sorted[i], (i + 1) as f64 / sorted.len() as f64))
        .collect()
}

fn ttft_cdf(root: &Area<'_>, series: &[Series<'_>], layout: &key::Layout) -> DrawResult {
    let (root, strip) = root.split_vertically(root.dim_in_pixel().1 - layout.height);
    let root = &root;
    let points = || {
        series
            .iter()
            .filter_map(|s| s.curves)
            .flat_map(|c| &c.ttft_cdf)
    };
    let lo = points().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let hi = points().map(|p| p.0).fold(0.0f64, f64::max);
    let (lo, hi) = if lo.is_finite() && hi > lo {
        (lo, hi)
    } else {
        (0.1, 1.0)
    };
    let mut chart = ChartBuilder::on(root)
        .caption(
            "Time to first token: share of requests at or below",
            ("sans-serif", 22),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d((lo..hi * 1.05).log_scale(), 0.0..1.0)?;
    chart
        .configure_mesh()
        .x_desc("TTFT (ms, log scale)")
        .y_desc("share of requests")
        .x_label_formatter(&|v| tick(*v))
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let Some(curves) = s.curves else { continue };
        policy_line(&mut chart, &curves.ttft_cdf, i, series.len())?;
    }
    key::draw(&strip, layout, true)?;
    Ok(())
}

type Chart<'a, 'b, X, Y> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<X, Y>>;

/// Run `index` of `count`'s line, in its colour, with its markers along it (eight of
/// them, when it has a marker).
fn policy_line<X, Y>(
    chart: &mut Chart<'_, '_, X, Y>,
    points: &[(f64, f64)],
    index: usize,
    count: usize,
) -> DrawResult
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let c = colour(index, count);
    chart.draw_series(LineSeries::new(points.iter().copied(), c.stroke_width(2)))?;
    let every = points.len().div_ceil(8).max(1);
    // Staggered by run, so that lines close together do not stack their markers.
    let marks = points.iter().copied().skip(index % every).step_by(every);
    match marker(index, count) {
        Marker::None => {}
        Marker::Circle => {
            chart.draw_series(marks.map(|p| Circle::new(p, 4, c.filled())))?;
        }
        Marker::Triangle => {
            chart.draw_series(marks.map(|p| TriangleMarker::new(p, 5, c.filled())))?;
        }
        Marker::Square => {
            chart.draw_series(marks.map(|p| {
                EmptyElement::at(p) + Rectangle::new([(-4, -4), (4, 4)], c.stroke_width(2))
            }))?;
        }
        Marker::Cross => {
            chart.draw_series(marks.map(|p| Cross::new(p, 4, c.stroke_width(2))))?;
        }
    }
    Ok(())
}

fn step_samples(events: &mut [(f64, i64)], horizon: f64, points: usize) -> Vec<(f64, f64)> {
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut out = Vec::with_capacity(points + 1);
    let (mut level, mut next) = (0i64, 0usize);
    for k in 0..=points {
        let t = horizon * k as f64 / points as f64;
        while next < events.len() && events[next].0 <= t {
            level += events[next].1;
            next += 1;
        }
        out.push((t, level as f64));
    }
    out
}

fn running(root: &Area<'_>, series: &[Series<'_>], horizon: f64) -> DrawResult {
    let none = Vec::new();
    panels(
        root,
        "Running requests per endpoint over time (one line per endpoint; each panel its own scale)",
        "running",
        series,
        horizon,
        |s| s.curves.map_or(&none, |c| &c.running).iter().collect(),
        |c| c.mix(0.7).into(),
    )
}

fn queue(root: &Area<'_>, series: &[Series<'_>], horizon: f64) -> DrawResult {
    panels(
        root,
        "Requests waiting to be scheduled, router and engine queues (each panel its own scale)",
        "waiting",
        series,
        horizon,
        |s| s.curves.map(|c| &c.queue).into_iter().collect(),
        |c| c.stroke_width(2),
    )
}

/// Count curves over time, a panel per policy (two a row), each panel on its own scale:
/// one policy's hot spot must not flatten every other's lines. `lines` picks a policy's
/// curves, `style` draws them in its colour.
fn panels<'s>(
    root: &Area<'_>,
    title: &str,
    y_desc: &str,
    series: &'s [Series<'s>],
    horizon: f64,
    lines: impl Fn(&Series<'s>) -> Vec<&'s Vec<(f64, f64)>>,
    style: impl Fn(RGBColor) -> ShapeStyle,
) -> DrawResult {
    let (head, body) = root.split_vertically(50);
    head.titled(title, ("sans-serif", 22))?;
    let rows = series.len().div_ceil(2);
    for (i, (s, panel)) in series.iter().zip(&body.split_evenly((rows, 2))).enumerate() {
        let c = colour(i, series.len());
        let (caption, size) = key::fitted_title(s.label, panel.dim_in_pixel().0, 16);
        let curves = lines(s);
        let top = curves
            .iter()
            .copied()
            .flatten()
            .map(|p| p.1)
            .fold(1.0f64, f64::max);
        let (y_top, y_labels) = count_axis(top);
        let mut chart = ChartBuilder::on(panel)
            .caption(caption, ("sans-serif", size).into_font().color(&c))
            .margin(8)
            .x_label_area_size(34)
            .y_label_area_size(44)
            .build_cartesian_2d(0.0..horizon, 0.0..y_top)?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_desc(y_desc)
            .y_labels(y_labels)
            .x_label_formatter(&|v| tick(*v))
            .y_label_formatter(&|v| tick(*v))
            .max_light_lines(2)
            .draw()?;
        for curve in curves {
            chart.draw_series(LineSeries::new(curve.iter().copied(), style(c)))?;
        }
    }
    Ok(())
}

/// The top of a count axis whose highest value is `top`, and how many labels it gets: up
/// to 10, one per whole number (a queue of 2 reads 0, 1, 2, not 0.20, 0.40, ...); above,
/// a little headroom and ten labels.
fn count_axis(top: f64) -> (f64, usize) {
    let top = top.ceil().max(1.0);
    if top <= 10.0 {
        (top, top as usize + 1)
    } else {
        (top * 1.05, 10)
    }
}

/// A group of bars: its name, and the value it shows of a report.
type Group = (&'static str, fn(&Report) -> f64);

fn hits(root: &Area<'_>, series: &[Series<'_>], layout: &key::Layout) -> DrawResult {
    let mut groups: Vec<Group> = vec![
        ("hit ratio", |r| {
            r.timed.as_ref().map_or(r.hit_ratio, |t| t.hit_ratio)
        }),
        ("achieved / best hit", |r| {
            r.quality.as_ref().map_or(0.0, |q| q.achieved_over_best)
        }),
        ("kv-optimal share", |r| {
            r.quality.as_ref().map_or(0.0, |q| q.kv_optimal_share)
        }),
    ];
    // A disaggregated fleet's pools, each its own hit ratio (0 for an aggregated run).
    if series
        .iter()
        .any(|s| s.report.timed.as_ref().is_some_and(|t| t.pools.is_some()))
    {
        groups.push(("prefill pool hit", |r| {
            r.timed
                .as_ref()
                .and_then(|t| t.pools.as_ref())
                .map_or(0.0, |p| p.prefill.hit_ratio)
        }));
        groups.push(("decode pool hit", |r| {
            r.timed
                .as_ref()
                .and_then(|t| t.pools.as_ref())
                .map_or(0.0, |p| p.decode.hit_ratio)
        }));
    }
    // KV tiers: where the reuse came from (0 for a run without them).
    if series.iter().any(|s| tiers_of(s.report).is_some()) {
        groups.push(("GPU-tier hit", |r| {
            tiers_of(r).map_or(0.0, |t| t.gpu_hit_ratio)
        }));
        groups.push(("host-tier hit", |r| {
            tiers_of(r).map_or(0.0, |t| t.host_hit_ratio)
        }));
        if series
            .iter()
            .any(|s| tiers_of(s.report).is_some_and(|t| t.shared_hit_ratio.is_some()))
        {
            groups.push(("shared-tier hit", |r| {
                tiers_of(r).and_then(|t| t.shared_hit_ratio).unwrap_or(0.0)
            }));
        }
    }
    // The key goes in a strip below the chart, never over a bar.
    let (plot, strip) = root.split_vertically(root.dim_in_pixel().1 - layout.height);
    let mut chart = ChartBuilder::on(&plot)
        .caption(
            "Prefix reuse: realised and against the best available",
            ("sans-serif", 22),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..groups.len() as f64, 0.0..1.0)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let g = x.floor() as usize;
            if (x - g as f64 - 0.5).abs() < 1e-9 && g < groups.len() {
                groups[g].0.to_owned()
            } else {
                String::new()
            }
        })
        .y_desc("share (0 to 1)")
        .y_labels(11)
        .max_light_lines(1)
        .y_label_formatter(&|v| format!("{v:.1}"))
        .draw()?;
    let n = series.len().max(1) as f64;
    let width = 0.8 / n;
    for (i, s) in series.iter().enumerate() {
        let c = colour(i, series.len());
        let bars = groups.iter().enumerate().map(|(g, (_, value))| {
            let x0 = g as f64 + 0.1 + width * i as f64;
            Rectangle::new([(x0, 0.0), (x0 + width * 0.9, value(s.report))], c.filled())
        });
        chart.draw_series(bars)?;
    }
    key::draw(&strip, layout, false)?;
    Ok(())
}

/// A timed report's KV tiers, when its engines had any.
fn tiers_of(report: &Report) -> Option<&routerlab_report::TiersReport> {
    report.timed.as_ref().and_then(|t| t.tiers.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_function_is_sampled_at_its_level_after_each_change() {
        let mut events = vec![(1.0, 1), (3.0, -1), (2.0, 1), (2.0, -1)];
        let s = step_samples(&mut events, 4.0, 4);
        let levels: Vec<f64> = s.iter().map(|p| p.1).collect();
        // t = 0, 1, 2, 3, 4: one starts at 1; at 2 one ends and one starts; at 3 one ends.
        assert_eq!(levels, [0.0, 1.0, 1.0, 0.0, 0.0]);
    }

    #[test]
    fn a_cdf_ends_at_one_with_at_most_the_points_asked_for_plus_the_last() {
        let sorted: Vec<f64> = (1..=1000).map(f64::from).collect();
        let points = cdf_points(&sorted, 100);
        assert!(points.len() <= 101);
        assert_eq!(points.last(), Some(&(1000.0, 1.0)));
        assert_eq!(points[0], (1.0, 0.001));
    }
}
