//! What commit verification (`capstan run --verify-commits`) adds to every cluster's status: a
//! `Verified` condition, and when the newest revision was refused, the refusal first in the
//! message, while the last verified revision is what the pass applied. Pure, so the rule for
//! when a refusal is news (and gets its Event) is a table test.

use crate::status::ConditionStatus::{False, True};
use crate::status::ConditionType::Verified;
use crate::status::{ManagedClusterStatus, Reason, Recorded, condition};

/// What verification says of the revisions a pass sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signature {
    /// The revision applied verified: who signed it, as a sentence.
    Verified(String),
    /// The newest revision was refused.
    Refused {
        /// The refused head commit.
        head: String,
        /// Why, naming the commit and the key.
        why: String,
        /// Refused as a rollback (the head does not descend from the last verified commit),
        /// rather than for its signatures.
        rollback: bool,
    },
}

impl Signature {
    /// The reason of its condition and Event.
    pub fn reason(&self) -> Reason {
        match self {
            Signature::Verified(_) => Reason::SignatureVerified,
            Signature::Refused { rollback: true, .. } => Reason::RollbackRefused,
            Signature::Refused { .. } => Reason::UnverifiedRevision,
        }
    }
}

/// The condition's message of a refusal, with the revision that stays.
fn refused_message(head: &str, why: &str, applied: &str) -> String {
    let stays = if applied.is_empty() {
        "nothing verified is applied yet".to_string()
    } else {
        format!("{applied} stays live")
    };
    format!("revision {head} not applied ({stays}): {why}")
}

/// `st` with the verification's condition (replacing one it had) and, for a refusal, the
/// refusal ahead of the message. `revision` is the one the pass applied.
pub fn signed(st: &ManagedClusterStatus, s: &Signature, revision: &str) -> ManagedClusterStatus {
    let mut out = st.clone();
    out.conditions.retain(|c| c.type_ != Verified.as_str());
    match s {
        Signature::Verified(by) => {
            out.conditions
                .push(condition(Verified, True, Reason::SignatureVerified, by));
        }
        Signature::Refused { head, why, .. } => {
            let message = refused_message(head, why, revision);
            // A status carried over from the record (a backup recorded mid-pass) has it already.
            out.message = if st.message.is_empty() {
                message.clone()
            } else if st.message.starts_with(&message) {
                st.message.clone()
            } else {
                format!("{message}; {}", st.message)
            };
            out.conditions
                .push(condition(Verified, False, s.reason(), &message));
        }
    }
    out
}

/// Whether the record does not say this refusal yet: the first pass that records it also
/// sends its Event (later passes over the same refused head do not).
pub fn newly_refused(prev: Option<&Recorded>, s: &Signature, revision: &str) -> bool {
    let Signature::Refused { head, why, .. } = s else {
        return false;
    };
    let message = refused_message(head, why, revision);
    !prev.is_some_and(|p| {
        p.status.conditions.iter().any(|c| {
            c.type_ == Verified.as_str() && c.status == False.as_str() && c.message == message
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{ConditionType, Phase};

    fn status(message: &str) -> ManagedClusterStatus {
        ManagedClusterStatus {
            phase: Some(Phase::Ready),
            message: message.into(),
            conditions: vec![condition(ConditionType::Ready, True, Reason::Available, "")],
            ..Default::default()
        }
    }

    fn refused() -> Signature {
        Signature::Refused {
            head: "bbbb".into(),
            why: "commit bbbb: the commit is not signed".into(),
            rollback: false,
        }
    }

    #[test]
    fn a_rollback_says_so_in_its_reason() {
        let back = Signature::Refused {
            head: "bbbb".into(),
            why: "commit bbbb: does not descend from aaaa, the last verified commit".into(),
            rollback: true,
        };
        let out = signed(&status("ready"), &back, "aaaa");
        let c = out.conditions.last().unwrap();
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            ("Verified", "False", "RollbackRefused")
        );
        assert_eq!(refused().reason(), Reason::UnverifiedRevision);
    }

    #[test]
    fn a_verified_revision_adds_a_true_condition_and_keeps_the_message() {
        let by = Signature::Verified("commit aaaa: good SSH signature by a@b (SHA256:x)".into());
        let out = signed(&status("ready"), &by, "aaaa");
        assert_eq!(out.message, "ready");
        let c = out.conditions.last().unwrap();
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            ("Verified", "True", "SignatureVerified")
        );
        assert_eq!(out.conditions.len(), 2);
    }

    #[test]
    fn a_refusal_leads_the_message_and_replaces_the_condition() {
        let first = signed(&status("ready"), &Signature::Verified("ok".into()), "aaaa");
        let out = signed(&first, &refused(), "aaaa");
        let want =
            "revision bbbb not applied (aaaa stays live): commit bbbb: the commit is not signed";
        assert_eq!(out.message, format!("{want}; ready"));
        assert_eq!(
            out.phase,
            Some(Phase::Ready),
            "the phase is the live revision's"
        );
        let verified: Vec<_> = out
            .conditions
            .iter()
            .filter(|c| c.type_ == "Verified")
            .collect();
        assert_eq!(verified.len(), 1);
        assert_eq!(
            (
                verified[0].status.as_str(),
                verified[0].reason.as_str(),
                verified[0].message.as_str()
            ),
            ("False", "UnverifiedRevision", want)
        );
        let again = signed(&out, &refused(), "aaaa");
        assert_eq!(
            again.message, out.message,
            "a status carried over is not prefixed twice"
        );
        let nothing = signed(&status(""), &refused(), "");
        assert!(
            nothing
                .message
                .contains("(nothing verified is applied yet)"),
            "{}",
            nothing.message
        );
    }

    #[test]
    fn a_refusal_is_news_until_the_record_says_it() {
        let rec = |st: ManagedClusterStatus| Recorded::new(String::new(), String::new(), 1, st);
        let recorded = rec(signed(&status("ready"), &refused(), "aaaa"));
        let other_head = Signature::Refused {
            head: "cccc".into(),
            why: "commit cccc: the commit is not signed".into(),
            rollback: false,
        };
        for (prev, s, news) in [
            (None, refused(), true),
            (Some(rec(status("ready"))), refused(), true),
            (Some(recorded.clone()), refused(), false),
            (Some(recorded.clone()), other_head, true),
            (Some(recorded), Signature::Verified("ok".into()), false),
        ] {
            assert_eq!(newly_refused(prev.as_ref(), &s, "aaaa"), news, "{s:?}");
        }
    }
}
