//! The process's tie to the one that started it, and the bounds a helper process sets on
//! itself. Each is called by a binary's own command for its own process, never by a
//! library on its caller's behalf.

/// Asks the kernel to kill this process when the process that started it ends (Linux;
/// elsewhere nothing). For a helper process whose parent may be killed while the helper is
/// stuck in a call and so never reads that its channel closed.
pub fn die_with_parent() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_SET_PDEATHSIG takes a signal number and touches no memory of ours.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        }
    }
}

/// [`die_with_parent`] for a process that leads its own process group (its parent started
/// it so), taking with it every process it started that is still in the group: the
/// parent's end delivers SIGTERM, whose handler kills the whole group (this process too)
/// with SIGKILL. A child that left the group (`setsid`) is beyond reach. Linux; elsewhere
/// nothing.
pub fn die_with_parent_and_group() {
    #[cfg(target_os = "linux")]
    {
        extern "C" fn kill_group(_signal: libc::c_int) {
            // SAFETY: kill(2) is async-signal-safe; 0 names this process's own group.
            unsafe {
                libc::kill(0, libc::SIGKILL);
            }
        }
        // SAFETY: the handler only calls kill(2), which is async-signal-safe; the action
        // struct is zeroed then filled as sigaction(2) documents; prctl takes a signal
        // number and touches no memory of ours.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = kill_group as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            // The parent may have ended before the request above took effect.
            if libc::getppid() == 1 {
                libc::kill(0, libc::SIGKILL);
            }
        }
    }
}

/// Ends this process and every process still in its group, with SIGKILL: for a helper
/// that leads its own group (its parent started it so) and is done, so that nothing it
/// started outlives it. Unix; elsewhere nothing, and the caller goes on to return.
pub fn end_own_group() {
    #[cfg(unix)]
    {
        // SAFETY: kill(2) with pid 0 signals this process's own group; no memory.
        unsafe {
            libc::kill(0, libc::SIGKILL);
        }
    }
}

/// Kills the process group `leader` leads (a helper started in a group of its own), with
/// SIGKILL: the helper and whatever it started that stayed in its group. Unix; elsewhere
/// nothing.
pub fn kill_group(leader: u32) {
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(leader) else {
            return;
        };
        if pid > 1 {
            // SAFETY: kill(2) with a negative pid signals that process group; no memory.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
    }
}

/// Bounds this process's data memory (heap and anonymous maps, `RLIMIT_DATA`) to `bytes`:
/// past it, allocations fail and the process ends, not the machine. Unix; elsewhere it
/// says it cannot.
pub fn limit_memory(bytes: u64) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let limit = libc::rlimit {
            rlim_cur: bytes as libc::rlim_t,
            rlim_max: bytes as libc::rlim_t,
        };
        // SAFETY: setrlimit(2) reads the struct on our stack and nothing else.
        match unsafe { libc::setrlimit(libc::RLIMIT_DATA, &limit) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = bytes;
        Err(std::io::Error::other("memory limits need a Unix system"))
    }
}

/// Whether `e` says the process (or the system) has no file descriptor to give (`EMFILE`,
/// `ENFILE`).
pub fn out_of_descriptors(e: &std::io::Error) -> bool {
    #[cfg(unix)]
    {
        matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
    }
    #[cfg(not(unix))]
    {
        let _ = e;
        false
    }
}
