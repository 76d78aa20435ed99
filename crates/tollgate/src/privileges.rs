//! `global.user` / `global.group`: once the listeners, the command socket, the
//! logs and the pidfile are open, the process gives up root for the account
//! named, as nginx's `user` and HAProxy's `user`/`group` do. It is done once,
//! for the whole process: glibc's `setgroups`, `setgid` and `setuid` (through
//! nix) change every thread's credentials, where the raw system calls would
//! change only the caller's.

use nix::unistd::{Gid, Uid, getegid, geteuid, getgid, getuid, initgroups, setgid, setgroups, setuid};
use std::ffi::CString;
use tollgate_config::RunAs;

/// What [`drop_to`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Dropped {
    /// The process runs as the account now.
    Switched,
    /// It ran as the account already (a process started by an upgrade from one
    /// that had switched).
    Already,
}

/// Switches the process to `run_as`: supplementary groups (the user's, from
/// the group database, or the group alone), then the group, then the user.
/// Refused, with the reason, when the process is neither root nor the account.
pub fn drop_to(run_as: &RunAs) -> Result<Dropped, String> {
    let uid = run_as.user.as_ref().map_or(geteuid(), |(_, id)| Uid::from_raw(*id));
    let gid = Gid::from_raw(run_as.group.1);
    let who = describe(run_as);
    if getuid() == uid && geteuid() == uid && getgid() == gid && getegid() == gid {
        return Ok(Dropped::Already);
    }
    if !geteuid().is_root() {
        return Err(format!(
            "cannot switch to {who}: running as uid {} (start as root, or leave global.user and group out)",
            geteuid()
        ));
    }
    match &run_as.user {
        Some((name, _)) => {
            let cname = CString::new(name.as_str()).map_err(|_| format!("user name `{name}` holds a NUL byte"))?;
            initgroups(&cname, gid).map_err(|e| format!("cannot set the groups of {who}: {e}"))?;
        }
        None => setgroups(&[gid]).map_err(|e| format!("cannot set the groups of {who}: {e}"))?,
    }
    setgid(gid).map_err(|e| format!("cannot switch to {who}: setgid: {e}"))?;
    setuid(uid).map_err(|e| format!("cannot switch to {who}: setuid: {e}"))?;
    // Root must be gone for good: with a user named, getting it back must fail.
    if !uid.is_root() && setuid(Uid::from_raw(0)).is_ok() {
        return Err(format!("switched to {who}, yet root could be regained: refusing to serve"));
    }
    Ok(Dropped::Switched)
}

/// `user tollgate (uid 998), group tollgate (gid 998)`.
pub fn describe(run_as: &RunAs) -> String {
    let (group, gid) = &run_as.group;
    match &run_as.user {
        Some((user, uid)) => format!("user {user} (uid {uid}), group {group} (gid {gid})"),
        None => format!("group {group} (gid {gid})"),
    }
}
