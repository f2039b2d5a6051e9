//! Progress bars on stderr: requests done, rate and time left, one bar per run.
//!
//! A bar is drawn only when stderr is a terminal and the run has gone on for a second (a
//! short run should print nothing but its result), and never when `--quiet`. Bars are
//! observers of the run ([`Observer::progress`]), so the drivers know nothing about
//! terminals, and stdout only ever carries the report.

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use routerlab_sim::SimError;
use routerlab_sim::observer::{Observer, RequestRecord};

/// How long a run goes before its bar appears.
const SHOW_AFTER: Duration = Duration::from_secs(1);

/// The bars of one command: none at all, or one per run under a shared, delayed display.
pub struct Bars {
    multi: Option<MultiProgress>,
    started: Instant,
}

impl Bars {
    /// Bars for this process: none when `quiet` or when stderr is not a terminal.
    pub fn new(quiet: bool) -> Bars {
        let multi = (!quiet && std::io::stderr().is_terminal())
            .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::hidden()));
        Bars {
            multi,
            started: Instant::now(),
        }
    }

    /// A bar for a run named `label` of `total` requests, or of a count not known ahead
    /// (a trace read as it goes): then it counts up without a bar.
    pub fn bar(&self, label: &str, total: Option<u64>) -> Bar<'_> {
        let bar = self.multi.as_ref().map(|multi| {
            let bar = match total {
                Some(total) => ProgressBar::new(total),
                None => ProgressBar::no_length(),
            };
            multi.add(
                bar.with_style(style(total.is_some()))
                    .with_prefix(label.to_owned()),
            )
        });
        Bar { bars: self, bar }
    }

    /// Shows the bars once the command has run for [`SHOW_AFTER`].
    fn reveal(&self) {
        if let Some(multi) = &self.multi
            && multi.is_hidden()
            && self.started.elapsed() >= SHOW_AFTER
        {
            multi.set_draw_target(ProgressDrawTarget::stderr());
        }
    }
}

/// A bar's look: with its length, or counting up when the length is not known.
fn style(with_length: bool) -> ProgressStyle {
    let template = match with_length {
        true => "{prefix} [{bar:30}] {pos}/{len} requests, {rate}, {eta} left",
        false => "{prefix} {pos} requests, {rate}, {elapsed}",
    };
    ProgressStyle::with_template(template)
        .expect("a valid template")
        .with_key(
            "rate",
            |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0}/s", state.per_sec());
            },
        )
        .progress_chars("=> ")
}

/// One run's bar; an [`Observer`] that only watches progress.
pub struct Bar<'a> {
    bars: &'a Bars,
    bar: Option<ProgressBar>,
}

impl Bar<'_> {
    /// Marks the run done and takes the bar off the screen.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Observer for Bar<'_> {
    fn finished(&mut self, _record: &RequestRecord) -> Result<(), SimError> {
        Ok(())
    }

    fn wants_finished(&self) -> bool {
        false
    }

    fn progress(&mut self, done: u64) {
        if let Some(bar) = &self.bar {
            self.bars.reveal();
            bar.set_position(done);
        }
    }

    fn expected(&mut self, requests: u64) {
        if let Some(bar) = &self.bar {
            bar.set_length(requests);
            bar.set_style(style(true));
        }
    }
}

/// A batch of runs draws one bar per run.
impl routerlab_experiment::batch::Watch for Bars {
    type Run<'a> = Bar<'a>;

    fn start(&self, label: &str, requests: u64) -> Bar<'_> {
        self.bar(label, Some(requests))
    }

    fn end(&self, run: Bar<'_>) {
        run.finish();
    }
}
