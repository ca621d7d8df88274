//! How every command that starts children is stopped: the first SIGINT,
//! SIGTERM or SIGHUP asks it to stop its children in order and remove their
//! folders; a second signal forces the exit at once (the throwaway
//! Postgres's orphan guard, `state_store::LocalPostgres`, still stops the
//! cluster and removes its folder then).
//!
//! SIGHUP stops these commands: none of them has a configuration to reload
//! (`callgate serve` keeps SIGHUP for reloads and never uses this).

use tokio::signal::unix::{SignalKind, signal};

/// A stop signal, by name, with its conventional exit status (128 + n).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    Interrupt,
    Terminate,
    Hangup,
}

impl StopSignal {
    /// `SIGINT`, `SIGTERM`, `SIGHUP`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Interrupt => "SIGINT",
            Self::Terminate => "SIGTERM",
            Self::Hangup => "SIGHUP",
        }
    }

    /// The exit status of a job cut short by this signal: 130, 143, 129.
    pub const fn exit_status(self) -> u8 {
        match self {
            Self::Interrupt => 130,
            Self::Terminate => 143,
            Self::Hangup => 129,
        }
    }
}

/// Resolves at the first SIGINT, SIGTERM or SIGHUP. From the moment it is
/// first polled those signals no longer kill the process by default, so
/// call [`force_on_second_signal`] once it resolves.
///
/// # Errors
/// A handler could not be installed (the runtime has no signal driver).
pub async fn stop_requested() -> std::io::Result<StopSignal> {
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    Ok(tokio::select! {
        _ = int.recv() => StopSignal::Interrupt,
        _ = term.recv() => StopSignal::Terminate,
        _ = hup.recv() => StopSignal::Hangup,
    })
}

/// While the children are being stopped, a second stop signal exits the
/// process at once with that signal's status.
pub fn force_on_second_signal() {
    tokio::spawn(async {
        if let Ok(sig) = stop_requested().await {
            eprintln!("{}: forced exit, not waiting for the children", sig.name());
            std::process::exit(i32::from(sig.exit_status()));
        }
    });
}
