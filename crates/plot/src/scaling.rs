//! A scaled fleet over its run: the endpoints the scaler wanted, those serving, and those
//! holding GPUs (serving, starting or draining), as steps in time.

use std::path::{Path, PathBuf};

use plotters::prelude::*;
use routerlab_report::ScalingReport;

use crate::{PlotError, tick, write_svg};

/// The file [`write_scaling`] writes.
pub const SCALING: &str = "scaling.svg";

/// The step line through `(t, value)` points: each value held until the next time, the
/// last until `end`.
fn steps(points: &[(f64, f64)], end: f64) -> Vec<(f64, f64)> {
    let mut line = Vec::with_capacity(points.len() * 2 + 1);
    for (i, &(t, v)) in points.iter().enumerate() {
        if i > 0 {
            line.push((t, points[i - 1].1));
        }
        line.push((t, v));
    }
    if let Some(&(_, v)) = points.last() {
        line.push((end, v));
    }
    line
}

/// Writes the endpoints-over-time plot of `scaling` into `dir`; `end_s` is the run's end.
pub fn write_scaling(
    dir: &Path,
    scaling: &ScalingReport,
    end_s: f64,
) -> Result<PathBuf, PlotError> {
    let last = scaling.timeline.last().map_or(0.0, |p| p.t_s);
    let end = end_s.max(last).max(1e-3);
    let series = |f: fn(&routerlab_report::ScalingPoint) -> u32| {
        let points: Vec<(f64, f64)> = scaling
            .timeline
            .iter()
            .map(|p| (p.t_s, f64::from(f(p))))
            .collect();
        steps(&points, end)
    };
    let held = series(|p| p.ready + p.starting + p.draining);
    let ready = series(|p| p.ready);
    let desired = series(|p| p.desired);
    // Room above the lines for the key.
    let top = held.iter().chain(&desired).map(|p| p.1).fold(1.0, f64::max) * 1.35 + 1.0;
    write_svg(dir, SCALING, (900, 480), |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!(
                    "Endpoints over time ({}; {:.3} GPU-hours)",
                    scaling.scaler, scaling.gpu_hours
                ),
                ("sans-serif", 22),
            )
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..end, 0.0..top)?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_desc("endpoints")
            .x_label_formatter(&|v| tick(*v))
            .y_label_formatter(&|v| tick(*v))
            .draw()?;
        let grey = RGBColor(150, 150, 150);
        let blue = RGBColor(31, 119, 180);
        let red = RGBColor(214, 39, 40);
        chart
            .draw_series(LineSeries::new(held, grey.stroke_width(2)))?
            .label("holding GPUs (starting, serving, draining)")
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], grey.stroke_width(2)));
        chart
            .draw_series(LineSeries::new(ready, blue.stroke_width(3)))?
            .label("serving")
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], blue.stroke_width(3)));
        chart
            .draw_series(DashedLineSeries::new(desired, 6, 4, red.stroke_width(2)))?
            .label("desired by the scaler")
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], red.stroke_width(2)));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::steps;

    #[test]
    fn values_hold_until_the_next_point() {
        assert_eq!(
            steps(&[(0.0, 1.0), (10.0, 5.0)], 20.0),
            [(0.0, 1.0), (10.0, 1.0), (10.0, 5.0), (20.0, 5.0)]
        );
    }
}
