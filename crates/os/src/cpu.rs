//! Where a thread runs: the CPU it is on, keeping a helper thread off the CPU of the thread
//! it works for, and keeping that thread on its CPU.
//!
//! Why: a replay reads its trace on a second thread for the event loop on the first. Some
//! kernels (a virtual machine's, packing its work onto few virtual CPUs) wake a thread that
//! blocked on a full queue on the CPU of the thread that woke it, where the two then take
//! turns while the other CPU idles. Off the loop's CPU, the reader cannot take its turns;
//! with the loop kept on its CPU, the loop cannot be moved to the reader's. Linux only;
//! elsewhere nothing changes.

/// The CPU the calling thread is on now, when the system says.
pub fn current() -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `sched_getcpu` takes nothing and returns a number (-1 on failure).
        let cpu = unsafe { libc::sched_getcpu() };
        usize::try_from(cpu).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// Where a helper of the calling thread is to run: on the CPUs the caller may use (those
/// it had before [`stay`] kept it on one), but for the one it is on. Taken on the caller,
/// then [`Apart::enter`]ed on the helper.
#[derive(Debug, Clone, Copy)]
pub struct Apart {
    /// The helper's CPUs, when the caller had another than its own.
    #[cfg(target_os = "linux")]
    cpus: Option<libc::cpu_set_t>,
}

/// The CPUs for a helper of the calling thread, off the one the caller is on (see
/// [`Apart`]).
pub fn apart() -> Apart {
    #[cfg(target_os = "linux")]
    {
        let before = BEFORE.with(std::cell::Cell::get).or_else(linux::allowed);
        let cpus = current().zip(before).and_then(|(cpu, mut cpus)| {
            if !linux::has(&cpus, cpu) || linux::count(&cpus) < 2 {
                return None;
            }
            linux::clear(&mut cpus, cpu);
            Some(cpus)
        });
        Apart { cpus }
    }
    #[cfg(not(target_os = "linux"))]
    {
        Apart {}
    }
}

impl Apart {
    /// Gives the calling thread (the helper) these CPUs from now on; `true` when they were
    /// set. Nothing changes when the caller had no CPU but its own, or the system refuses.
    pub fn enter(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            self.cpus.is_some_and(|cpus| linux::set_allowed(&cpus))
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }
}

/// Whether a thread of the process stays on its CPU (see [`stay`]).
#[cfg(target_os = "linux")]
static STAYING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[cfg(target_os = "linux")]
thread_local! {
    /// The CPUs the thread had before [`stay`] kept it on one, while it does.
    static BEFORE: std::cell::Cell<Option<libc::cpu_set_t>> = const { std::cell::Cell::new(None) };
}

/// Keeps the calling thread on the CPU it is on until the returned guard goes (on that
/// thread), when it may run on every CPU it was allowed before again. Why: a thread woken
/// by a helper may be moved to the helper's CPU (the kernel's wake-up affinity), where the
/// two then take turns while the other CPU idles; kept in place, the thread that is waited
/// for never shares a CPU with its helpers ([`apart`], which still gives them the CPUs it
/// had before). One thread of the process stays at a time: two kept on the CPU each started
/// on could be kept on the same one while another idles, so while one stays, another asking
/// is left free to move. Nothing changes then, or when the thread was allowed a single CPU,
/// or the system refuses, or elsewhere than on Linux.
#[must_use = "the thread stays only while the guard lives"]
pub fn stay() -> Stay {
    #[cfg(target_os = "linux")]
    {
        use std::sync::atomic::Ordering;
        let first = || {
            STAYING
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        };
        let before = linux::allowed().filter(|set| linux::count(set) >= 2 && first());
        let kept = before.and_then(|before| {
            let cpu = current().filter(|cpu| linux::has(&before, *cpu))?;
            let mut only = before;
            (0..linux::SET_SIZE)
                .filter(|c| *c != cpu)
                .for_each(|c| linux::clear(&mut only, c));
            linux::set_allowed(&only).then_some(before)
        });
        match kept {
            Some(_) => BEFORE.with(|b| b.set(kept)),
            None if before.is_some() => STAYING.store(false, Ordering::Release),
            None => {}
        }
        Stay {
            kept: kept.is_some(),
            _here: std::marker::PhantomData,
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        Stay {
            _here: std::marker::PhantomData,
        }
    }
}

/// What [`stay`] returns: while it lives, its thread stays on its CPU.
#[derive(Debug)]
pub struct Stay {
    /// Whether the thread was narrowed (its CPUs before are in `BEFORE`).
    #[cfg(target_os = "linux")]
    kept: bool,
    /// Dropped on the thread it narrowed (a thread's CPUs are set from that thread).
    _here: std::marker::PhantomData<*const ()>,
}

impl Stay {
    /// Whether the thread was kept on its CPU (it had others it may run on).
    pub fn kept(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            self.kept
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }
}

impl Drop for Stay {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if self.kept
            && let Some(before) = BEFORE.with(std::cell::Cell::take)
        {
            linux::set_allowed(&before);
            STAYING.store(false, std::sync::atomic::Ordering::Release);
        }
    }
}

/// Lets the calling thread run only on a CPU no other thread wants (Linux's `SCHED_IDLE`):
/// for work that helps but is not waited for, so that a thread that is waited for, woken
/// on the same CPU, takes it at once instead of after the helper's turn. `false` when the
/// system refuses, or elsewhere than on Linux; nothing changes then.
pub fn background() -> bool {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: pid 0 is the calling thread; the call only reads `param`, which lives
        // across it.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

#[cfg(target_os = "linux")]
mod linux {
    /// CPUs a set can name.
    pub(super) const SET_SIZE: usize = libc::CPU_SETSIZE as usize;

    /// The calling thread's allowed CPUs.
    pub(super) fn allowed() -> Option<libc::cpu_set_t> {
        // SAFETY: `cpu_set_t` is plain bits; all zeros is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: pid 0 is the calling thread; the size given is the set's own, which the
        // call writes within.
        let done = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
        (done == 0).then_some(set)
    }

    /// Gives the calling thread exactly these CPUs.
    pub(super) fn set_allowed(set: &libc::cpu_set_t) -> bool {
        // SAFETY: pid 0 is the calling thread; the call reads the set within its own size.
        unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), set) == 0 }
    }

    pub(super) fn has(set: &libc::cpu_set_t, cpu: usize) -> bool {
        // SAFETY: only reads the set's bits; `cpu` is checked against the set's size first.
        cpu < SET_SIZE && unsafe { libc::CPU_ISSET(cpu, set) }
    }

    pub(super) fn count(set: &libc::cpu_set_t) -> usize {
        (0..SET_SIZE).filter(|c| has(set, *c)).count()
    }

    pub(super) fn clear(set: &mut libc::cpu_set_t, cpu: usize) {
        if cpu < SET_SIZE {
            // SAFETY: only writes the set's bits; `cpu` is within the set's size.
            unsafe { libc::CPU_CLR(cpu, set) };
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::sync::{Mutex, PoisonError, mpsc};

    use super::*;

    /// The tests that stay, one at a time: one thread of the process stays at a time.
    static ONE_STAYS: Mutex<()> = Mutex::new(());

    /// Runs `test` on a thread of its own (whose CPUs it may change), given that thread's
    /// CPUs, while no other test stays.
    fn staying_apart(test: impl FnOnce(Vec<usize>) + Send + 'static) {
        let _one = ONE_STAYS.lock().unwrap_or_else(PoisonError::into_inner);
        std::thread::spawn(|| test(allowed())).join().unwrap();
    }

    /// The CPUs the calling thread may run on, by number.
    fn allowed() -> Vec<usize> {
        let set = linux::allowed().expect("Linux tells a thread's CPUs");
        (0..linux::SET_SIZE)
            .filter(|c| linux::has(&set, *c))
            .collect()
    }

    /// A helper entering the CPUs [`apart`] gave it leaves its caller's CPU when it may run
    /// elsewhere, and is left as it was when it may not; the caller is untouched. Taken
    /// while the caller stays on its CPU, the helper gets the caller's other CPUs all the
    /// same.
    #[test]
    fn a_helper_keeps_off_its_callers_cpu_when_it_has_another() {
        staying_apart(|before| {
            let check = |apart: Apart| {
                let cpu = current().expect("Linux tells a thread's CPU");
                let (entered, after, now) = std::thread::spawn(move || {
                    let entered = apart.enter();
                    std::thread::yield_now();
                    (entered, allowed(), current())
                })
                .join()
                .unwrap();
                if before.len() >= 2 {
                    assert!(entered);
                    let expected: Vec<usize> =
                        before.iter().copied().filter(|c| *c != cpu).collect();
                    assert_eq!(after, expected);
                    assert_ne!(now, Some(cpu));
                } else {
                    assert!(!entered);
                    assert_eq!(after, before);
                }
            };
            let stay = stay();
            check(apart());
            drop(stay);
            assert_eq!(allowed(), before, "the caller's CPUs are its own again");
        });
    }

    /// A thread told to stay keeps to the CPU it is on while the guard lives, and gets
    /// back every CPU it had when the guard goes. While it stays, another thread asking to
    /// is left free to move.
    #[test]
    fn a_thread_told_to_stay_keeps_to_its_cpu_until_the_guard_goes() {
        staying_apart(|before| {
            // Started before the first stays, with every CPU.
            let (ask, wait) = mpsc::channel::<()>();
            let (tell, heard) = mpsc::channel();
            let other = std::thread::spawn(move || {
                let cpus = allowed();
                wait.recv().unwrap();
                let stay = stay();
                tell.send((stay.kept(), allowed() == cpus)).unwrap();
            });
            let stay = stay();
            let during = allowed();
            if before.len() >= 2 {
                assert!(stay.kept());
                assert_eq!(during.len(), 1, "{during:?}");
                assert!(before.contains(&during[0]));
                for _ in 0..100 {
                    std::thread::yield_now();
                    assert_eq!(current(), Some(during[0]));
                }
            } else {
                assert!(!stay.kept());
                assert_eq!(during, before);
            }
            ask.send(()).unwrap();
            assert_eq!(heard.recv().unwrap(), (false, true));
            other.join().unwrap();
            drop(stay);
            assert_eq!(allowed(), before);
            // Then one may stay again.
            assert_eq!(super::stay().kept(), before.len() >= 2);
        });
    }

    /// The calling thread's scheduling policy.
    fn policy() -> i32 {
        // SAFETY: pid 0 is the calling thread; the call takes nothing else.
        unsafe { libc::sched_getscheduler(0) }
    }

    /// A thread put in the background runs under `SCHED_IDLE` from then on; the thread
    /// that started it keeps its own policy.
    #[test]
    fn a_thread_put_in_the_background_is_scheduled_as_idle_and_no_other() {
        let before = policy();
        assert_ne!(before, libc::SCHED_IDLE);
        let (done, after) = std::thread::spawn(|| (background(), policy()))
            .join()
            .unwrap();
        assert!(done, "Linux lets a thread lower its own policy");
        assert_eq!(after, libc::SCHED_IDLE);
        assert_eq!(policy(), before);
    }
}
