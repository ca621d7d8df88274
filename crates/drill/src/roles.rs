//! Each role as a caller's plan ([`callgate_load::CallPlan`]): what it says,
//! when it waits for the conductor, and how it leaves.
//!
//! Every role holds the line after its script ([`CallPlan::hold`]) so the
//! step's commitment stays until the drill hangs everybody up; only the
//! cancel-tool caller leaves by itself, and the dropped ones when told.

use std::time::Duration;

use callgate_load::{
    AccountSid, CallIds, CallPlan, CallProtocol, CallSid, Leave, PartnerFormat, StreamSid, TurnPlan,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::fixture::{Ingress, Role, RoleSettings};

/// The think pause before each scripted utterance, drawn per turn.
const THINK_MS: (u64, u64) = (300, 800);

/// One session to place: who it is and how it arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seat {
    /// Its number in the run (0-based, across steps).
    pub index: usize,
    pub role: Role,
    pub ingress: Ingress,
}

/// The plan of `seat`, with `call_timeout` as its hard limit; voices and
/// pauses are drawn from `seed`.
pub fn plan(seat: Seat, roles: &RoleSettings, seed: u64, call_timeout: Duration) -> CallPlan {
    let mut rng = StdRng::seed_from_u64(seed ^ (seat.index as u64).wrapping_mul(0x9E37_79B9));
    let utterance = |rng: &mut StdRng, cued: bool| TurnPlan {
        think: if cued {
            Duration::ZERO
        } else {
            Duration::from_millis(rng.random_range(THINK_MS.0..=THINK_MS.1))
        },
        speech_ms: roles.utterance_ms,
        cued,
    };
    let scripted = |rng: &mut StdRng, n: usize| (0..n).map(|_| utterance(rng, false)).collect();
    let turns: Vec<TurnPlan> = match seat.role {
        Role::Quiet => vec![utterance(&mut rng, true)],
        Role::Speaker | Role::Interrupter => scripted(&mut rng, roles.speaker_utterances),
        Role::ToolWaiter | Role::CancelTool => scripted(&mut rng, roles.tool_utterance),
        Role::Disconnecter | Role::Reconnecter => scripted(&mut rng, 1),
    };
    let leave = (seat.role == Role::CancelTool).then(|| Leave {
        after_utterance: roles.tool_utterance,
        delay: Duration::from_millis(roles.cancel_after_ms),
    });
    let barge_in_at =
        (seat.role == Role::Interrupter).then(|| Duration::from_millis(roles.barge_in_at_ms));
    CallPlan {
        index: seat.index,
        ids: CallIds {
            account: AccountSid::random(),
            call: CallSid::random(),
            stream: StreamSid::random(),
        },
        custom_parameters: vec![("drill_role".into(), seat.role.label().into())],
        turns,
        silence_threshold: Duration::from_millis(roles.silence_threshold_ms),
        call_timeout,
        voice_seed: rng.random(),
        protocol: match seat.ingress {
            // A SIP leg never gets a plan: its caller is the SIP dialer.
            Ingress::Twilio | Ingress::Sip => CallProtocol::Twilio,
            Ingress::Partner => CallProtocol::Partner(PartnerFormat::Pcmu),
        },
        barge_in_at,
        cough: None,
        hold: true,
        leave,
    }
}

/// The ingress of each of `n` sessions, in the fixture's proportions and
/// in a seeded order: weights 2:1 over 10 sessions give 7 and 3 (largest
/// remainder), shuffled.
pub fn ingresses(weights: &[(Ingress, u32)], n: usize, seed: u64) -> Vec<Ingress> {
    let total: u64 = weights.iter().map(|(_, w)| u64::from(*w)).sum();
    if total == 0 || n == 0 {
        return Vec::new();
    }
    let mut counts: Vec<(Ingress, usize, u64)> = weights
        .iter()
        .map(|(i, w)| {
            let exact = n as u64 * u64::from(*w);
            (*i, (exact / total) as usize, exact % total)
        })
        .collect();
    let mut left = n - counts.iter().map(|c| c.1).sum::<usize>();
    let mut by_remainder: Vec<usize> = (0..counts.len()).collect();
    by_remainder.sort_by_key(|&i| std::cmp::Reverse(counts[i].2));
    for i in by_remainder {
        if left == 0 {
            break;
        }
        counts[i].1 += 1;
        left -= 1;
    }
    let mut out: Vec<Ingress> = counts
        .iter()
        .flat_map(|(i, c, _)| std::iter::repeat_n(*i, *c))
        .collect();
    shuffle(&mut out, seed);
    out
}

/// Fisher–Yates with a seeded generator.
pub fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    for i in (1..items.len()).rev() {
        items.swap(i, rng.random_range(0..=i));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> RoleSettings {
        RoleSettings {
            speaker_utterances: 2,
            tool_utterance: 4,
            cancel_after_ms: 1_000,
            barge_in_at_ms: 400,
            utterance_ms: 1_200,
            silence_threshold_ms: 3_000,
            reconnect_after_ms: 2_000,
        }
    }

    fn seat(role: Role) -> CallPlan {
        let s = Seat {
            index: 3,
            role,
            ingress: Ingress::Twilio,
        };
        plan(s, &settings(), 7, Duration::from_secs(60))
    }

    #[test]
    fn each_role_says_what_it_is_for_and_holds_the_line() {
        let quiet = seat(Role::Quiet);
        assert_eq!(quiet.turns.len(), 1);
        assert!(quiet.turns[0].cued, "a quiet caller speaks only when told");
        assert_eq!(seat(Role::Speaker).turns.len(), 2);
        assert!(seat(Role::Speaker).turns.iter().all(|t| !t.cued));
        assert_eq!(seat(Role::ToolWaiter).turns.len(), 4);
        assert_eq!(seat(Role::ToolWaiter).leave, None);
        let cancel = seat(Role::CancelTool);
        assert_eq!(
            cancel.leave,
            Some(Leave {
                after_utterance: 4,
                delay: Duration::from_secs(1)
            })
        );
        assert_eq!(
            seat(Role::Interrupter).barge_in_at,
            Some(Duration::from_millis(400))
        );
        assert_eq!(seat(Role::Disconnecter).turns.len(), 1);
        for r in [
            Role::Quiet,
            Role::Speaker,
            Role::CancelTool,
            Role::Reconnecter,
        ] {
            assert!(seat(r).hold, "{r:?}");
        }
        let partner = plan(
            Seat {
                index: 0,
                role: Role::Speaker,
                ingress: Ingress::Partner,
            },
            &settings(),
            7,
            Duration::from_secs(60),
        );
        assert_eq!(partner.protocol, CallProtocol::Partner(PartnerFormat::Pcmu));
    }

    #[test]
    fn ingresses_follow_the_weights_and_the_seed() {
        let w = [(Ingress::Partner, 1), (Ingress::Twilio, 2)];
        let ten = ingresses(&w, 10, 1);
        let partners = ten.iter().filter(|i| **i == Ingress::Partner).count();
        assert_eq!((ten.len(), partners), (10, 3));
        assert_eq!(ten, ingresses(&w, 10, 1), "the same seed, the same order");
        assert_ne!(ten, ingresses(&w, 10, 2), "another seed, another order");
        assert!(ingresses(&[(Ingress::Twilio, 0)], 5, 1).is_empty());
    }
}
