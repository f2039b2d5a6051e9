//! `serve`'s in-process plugins on one thread of their own, which owns the `Router` and
//! answers calls sent over a channel, in the stable endpoint indices the plugin host
//! speaks (`plugin_host::by_index`).
//!
//! Why a thread: a plugin call may never return. Made on a runtime worker it would hold
//! that worker, and whatever waited behind it, for ever. Here a caller waits at most the
//! deadline (`--plugin-timeout-ms`); a call past it fails (the request is answered as
//! `--on-plugin-error` says), and the thread is *stuck* until the call returns: meanwhile
//! every call fails at once, and `/health` says which call is stuck. The thread cannot be
//! stopped (the plugin's code is running on it), only waited out; a process of its own is
//! `--plugin-isolation process`.
//!
//! Calls whose answer nothing waits for (what became of a request: `update`,
//! `on_first_token`, `on_complete`) are [`PluginThread::send`]: queued, not waited for, as
//! the plugin host is sent them. The thread runs calls in the order they came, so a
//! decision still sees every earlier notice; a notice that fails is counted
//! ([`PluginThread::late_failures`]), and one that hangs makes the next waited call miss
//! its deadline and names the notice as the call the thread is stuck in.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use routerlab_route::Router;

/// A call for the thread: runs on the `Router`, answers through its own channel.
type Job = Box<dyn FnOnce(&mut Router) + Send>;

/// The thread that owns the plugins, and how to reach it.
pub(crate) struct PluginThread {
    jobs: mpsc::Sender<Job>,
    matcher: String,
    deadline: Duration,
    /// The call past its deadline that the thread is still in, if any.
    stuck: Arc<Mutex<Option<&'static str>>>,
    /// The call the thread is running now (taken under `stuck`'s lock after it).
    running: Arc<Mutex<Option<&'static str>>>,
    /// Calls sent without waiting that failed.
    late_failures: Arc<AtomicU64>,
}

impl PluginThread {
    /// Starts the thread for `router`, each call waited for at most `deadline`.
    pub(crate) fn start(router: Router, deadline: Duration) -> std::io::Result<PluginThread> {
        let matcher = router.matcher_name().to_owned();
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("routerlab-plugins".into())
            .spawn(move || {
                let mut router = router;
                // Ends when `serve` lets go of the sender.
                for job in queue {
                    job(&mut router);
                }
            })?;
        Ok(PluginThread {
            jobs,
            matcher,
            deadline,
            stuck: Arc::new(Mutex::new(None)),
            running: Arc::new(Mutex::new(None)),
            late_failures: Arc::new(AtomicU64::new(0)),
        })
    }

    /// `f` run as the call `what`: marked running while it runs, and the thread freed of
    /// being stuck when it returns (then `done` has its result).
    fn job<R: Send + 'static>(
        &self,
        what: &'static str,
        f: impl FnOnce(&mut Router) -> R + Send + 'static,
        done: impl FnOnce(R) + Send + 'static,
    ) -> Job {
        let (stuck, running) = (self.stuck.clone(), self.running.clone());
        Box::new(move |router| {
            *running.lock().unwrap_or_else(|p| p.into_inner()) = Some(what);
            let result = f(router);
            // Free and answer under one hold of the lock: a caller whose deadline passes
            // meanwhile finds the answer there (never a freed thread without it) and does
            // not mark the thread stuck. `done` never blocks (a channel of one, or a count).
            let mut stuck = stuck.lock().unwrap_or_else(|p| p.into_inner());
            *stuck = None;
            *running.lock().unwrap_or_else(|p| p.into_inner()) = None;
            done(result);
            drop(stuck);
        })
    }

    /// Queues `f` as the call `what` without waiting for it; a failure it returns is
    /// counted in [`PluginThread::late_failures`]. An error only when the thread is stuck
    /// or gone.
    pub(crate) fn send<E: Send + 'static>(
        &self,
        what: &'static str,
        f: impl FnOnce(&mut Router) -> Result<(), E> + Send + 'static,
    ) -> Result<(), String> {
        if let Some(stuck) = self.stuck() {
            return Err(self.stuck_message(stuck));
        }
        let failures = self.late_failures.clone();
        let job = self.job(what, f, move |result| {
            if result.is_err() {
                failures.fetch_add(1, Ordering::Relaxed);
            }
        });
        self.jobs
            .send(job)
            .map_err(|_| "the plugins' thread has ended".to_owned())
    }

    /// Calls sent without waiting ([`PluginThread::send`]) that failed so far.
    pub(crate) fn late_failures(&self) -> u64 {
        self.late_failures.load(Ordering::Relaxed)
    }

    /// The matcher's name.
    pub(crate) fn matcher_name(&self) -> &str {
        &self.matcher
    }

    /// The call the thread is stuck in, past its deadline, if it is.
    pub(crate) fn stuck(&self) -> Option<&'static str> {
        *self.stuck.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the router (the call named `what` in messages) and returns its answer;
    /// an error when the thread is stuck, or when `f` has not returned by the deadline
    /// (then the thread is stuck until it does).
    pub(crate) fn call<R: Send + 'static>(
        &self,
        what: &'static str,
        f: impl FnOnce(&mut Router) -> R + Send + 'static,
    ) -> Result<R, String> {
        if let Some(stuck) = self.stuck() {
            return Err(self.stuck_message(stuck));
        }
        let (answer, answered) = mpsc::sync_channel(1);
        let job = self.job(what, f, move |result| {
            let _ = answer.send(result);
        });
        self.jobs
            .send(job)
            .map_err(|_| "the plugins' thread has ended".to_owned())?;
        match answered.recv_timeout(self.deadline) {
            Ok(result) => Ok(result),
            Err(RecvTimeoutError::Timeout) => {
                let mut stuck = self.stuck.lock().unwrap_or_else(|p| p.into_inner());
                if let Ok(result) = answered.try_recv() {
                    return Ok(result);
                }
                // The call the thread is in: this one, or a notice queued before it.
                let running = *self.running.lock().unwrap_or_else(|p| p.into_inner());
                let hung = running.unwrap_or(what);
                *stuck = Some(hung);
                let behind = if hung == what {
                    String::new()
                } else {
                    format!(" (it waited behind `{hung}`, which has not returned)")
                };
                Err(format!(
                    "plugin `{}` did not return from `{what}` within {} ms{behind}",
                    self.matcher,
                    self.deadline.as_millis()
                ))
            }
            Err(RecvTimeoutError::Disconnected) => Err("the plugins' thread has ended".into()),
        }
    }

    fn stuck_message(&self, call: &str) -> String {
        format!(
            "plugin `{}` is stuck in `{call}` (past its {} ms deadline)",
            self.matcher,
            self.deadline.as_millis()
        )
    }
}

#[cfg(test)]
mod tests {
    use routerlab_core::testing::FirstAvailable;
    use routerlab_host::{EndpointTable, in_process};
    use routerlab_route::WhenUnavailable;

    use super::*;

    fn router(names: &[&str]) -> Router {
        let matcher = in_process::matcher::<FirstAvailable>("first", "").unwrap();
        let table = EndpointTable::new(names.iter().copied());
        let Ok(router) = Router::new(matcher, None, table, WhenUnavailable::Reject) else {
            panic!("a router")
        };
        router
    }

    #[test]
    fn a_call_past_its_deadline_fails_and_the_next_fails_at_once_until_it_returns() {
        let thread = PluginThread::start(router(&["a:1", "b:2"]), Duration::from_millis(100))
            .expect("a thread");
        assert_eq!(thread.call("count", |r| r.table().len()), Ok(2));
        let release = Arc::new(std::sync::Barrier::new(2));
        let held = release.clone();
        let started = std::time::Instant::now();
        let err = thread
            .call("hang", move |_| {
                held.wait();
            })
            .unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert!(
            err.contains("did not return from `hang` within 100 ms"),
            "{err}"
        );
        assert_eq!(thread.stuck(), Some("hang"));
        let started = std::time::Instant::now();
        let err = thread.call("count", |r| r.table().len()).unwrap_err();
        assert!(
            started.elapsed() < Duration::from_millis(50),
            "failed at once"
        );
        assert!(err.contains("is stuck in `hang`"), "{err}");
        // The call returns: the thread answers again.
        release.wait();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while thread.stuck().is_some() {
            assert!(std::time::Instant::now() < deadline, "still stuck");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(thread.call("count", |r| r.table().len()), Ok(2));
    }

    /// Notices are not waited for, run in order before a later call, and a failing one is
    /// counted; a hung one is named when the next waited call misses its deadline.
    #[test]
    fn notices_are_queued_in_order_counted_when_they_fail_and_named_when_they_hang() {
        let thread = PluginThread::start(router(&["a:1", "b:2"]), Duration::from_millis(100))
            .expect("a thread");
        let seen = Arc::new(Mutex::new(Vec::new()));
        for n in 0..3 {
            let seen = seen.clone();
            let sent = thread.send("update", move |_| {
                seen.lock().unwrap().push(n);
                if n == 1 { Err("refused") } else { Ok(()) }
            });
            assert_eq!(sent, Ok(()));
        }
        // A waited call runs after every notice sent before it.
        let order = seen.clone();
        assert_eq!(
            thread.call("count", move |_| order.lock().unwrap().clone()),
            Ok(vec![0, 1, 2])
        );
        assert_eq!(thread.late_failures(), 1);

        let release = Arc::new(std::sync::Barrier::new(2));
        let held = release.clone();
        let started = std::time::Instant::now();
        assert_eq!(
            thread.send("on_complete", move |_| {
                held.wait();
                Ok::<(), ()>(())
            }),
            Ok(())
        );
        assert!(
            started.elapsed() < Duration::from_millis(50),
            "not waited for"
        );
        let err = thread.call("decide", |r| r.table().len()).unwrap_err();
        assert!(
            err.contains("did not return from `decide` within 100 ms")
                && err.contains("it waited behind `on_complete`"),
            "{err}"
        );
        assert_eq!(thread.stuck(), Some("on_complete"));
        let refused = thread.send("update", |_| Ok::<(), ()>(()));
        assert!(refused.is_err_and(|e| e.contains("is stuck in `on_complete`")));
        release.wait();
    }
}
