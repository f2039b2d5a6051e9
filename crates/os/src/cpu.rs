//! Where a thread runs: the CPU it is on, and keeping a helper thread off the CPU of the
//! thread it works for.
//!
//! Why: a replay reads its trace on a second thread for the event loop on the first. Some
//! kernels (a virtual machine's, packing its work onto few virtual CPUs) wake a thread that
//! blocked on a full queue on the CPU of the thread that woke it, where the two then take
//! turns while the other CPU idles. Off the loop's CPU, the reader cannot take its turns.
//! Linux only; elsewhere nothing changes.

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

/// Keeps the calling thread off `cpu` from now on: it may run on every other CPU it was
/// allowed. Nothing changes when it was not allowed `cpu`, or was allowed no other, or the
/// system refuses; `true` when its CPUs were narrowed.
pub fn avoid(cpu: usize) -> bool {
    #[cfg(target_os = "linux")]
    {
        let Some(mut allowed) = linux::allowed() else {
            return false;
        };
        if !linux::has(&allowed, cpu) || linux::count(&allowed) < 2 {
            return false;
        }
        linux::clear(&mut allowed, cpu);
        linux::set_allowed(&allowed)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cpu;
        false
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
    use super::*;

    /// The CPUs the calling thread may run on, by number.
    fn allowed() -> Vec<usize> {
        let set = linux::allowed().expect("Linux tells a thread's CPUs");
        (0..linux::SET_SIZE)
            .filter(|c| linux::has(&set, *c))
            .collect()
    }

    /// A thread told to avoid the CPU it is on leaves it when it may run elsewhere, and is
    /// left as it was when it may not.
    #[test]
    fn a_thread_avoids_the_cpu_it_is_told_to_when_it_has_another() {
        let cpu = current().expect("Linux tells a thread's CPU");
        let before = allowed();
        assert!(before.contains(&cpu), "{cpu} not in {before:?}");
        let (narrowed, after, now) = std::thread::spawn(move || {
            let narrowed = avoid(cpu);
            std::thread::yield_now();
            (narrowed, allowed(), current())
        })
        .join()
        .unwrap();
        if before.len() >= 2 {
            assert!(narrowed);
            let expected: Vec<usize> = before.iter().copied().filter(|c| *c != cpu).collect();
            assert_eq!(after, expected);
            assert_ne!(now, Some(cpu));
        } else {
            assert!(!narrowed);
            assert_eq!(after, before);
        }
        // The caller's own CPUs are untouched.
        assert_eq!(allowed(), before);
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
