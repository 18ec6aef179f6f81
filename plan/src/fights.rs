//! Fights between capstan and another field manager, detected and broken off.
//!
//! ```text
//! drift on object X (someone else changed fields capstan owns)
//!   ├─ fewer than FIGHT_THRESHOLD times in FIGHT_WINDOW ─▶ Correct (re-apply, as drift always is)
//!   └─ the FIGHT_THRESHOLD-th time ─────────────────────▶ Hold for FIGHT_HOLD: not re-applied,
//!                                                          Action::Conflict naming the manager
//! ```
//!
//! Two controllers that each insist on their value for a field (capstan from Git, an operator
//! or a mutating controller from its own config) rewrite it forever: every write wakes the
//! other. GitOps agents are known for these endless fights; the usual symptom is an object whose
//! `resourceVersion` climbs by the second. capstan corrects drift a couple of times (a one-off
//! hand edit is the common case), and when the same object drifts again and again it stops,
//! says who it is fighting with (the field manager that last wrote the object), and tries again
//! once the hold has passed. The state is memory only: a restarted agent starts counting again,
//! which costs at most FIGHT_THRESHOLD - 1 more corrections.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde_json::Value;

use capstan_templates::identity::FIELD_MANAGER;

/// Drift corrections of one object within [`FIGHT_WINDOW`] that make a fight.
pub const FIGHT_THRESHOLD: usize = 3;
/// The window the corrections are counted in.
pub const FIGHT_WINDOW: Duration = Duration::from_secs(600);
/// How long a fought-over object is left as the other manager wrote it.
pub const FIGHT_HOLD: Duration = Duration::from_secs(600);

/// What to do about a drifted object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Re-apply it.
    Correct,
    /// Leave it: capstan is fighting over it.
    Hold {
        /// The other field manager, when known.
        manager: Option<String>,
        /// Corrections counted before the hold.
        corrections: usize,
        /// Time left before capstan corrects it again.
        left: Duration,
        /// The fight was detected just now (not an ongoing hold).
        new: bool,
    },
}

#[derive(Debug, Default)]
struct History {
    corrections: VecDeque<Instant>,
    held_until: Option<Instant>,
    manager: Option<String>,
    counted: usize,
}

/// The drift history of the objects that drifted recently (everything else holds no state).
#[derive(Debug, Default)]
pub struct Fights {
    objects: HashMap<String, History>,
}

impl Fights {
    /// Object `key` was found drifted at `now`, last written by `manager`: correct it or hold.
    pub fn drifted(&mut self, key: &str, manager: Option<&str>, now: Instant) -> Verdict {
        // Forget what has aged out, so the map only holds objects drifting now.
        self.objects.retain(|_, h| {
            h.held_until.is_some_and(|t| t > now)
                || h.corrections
                    .back()
                    .is_some_and(|t| now.duration_since(*t) < FIGHT_WINDOW)
        });
        let h = self.objects.entry(key.to_string()).or_default();
        if let Some(until) = h.held_until {
            if until > now {
                return Verdict::Hold {
                    manager: manager.map(str::to_string).or_else(|| h.manager.clone()),
                    corrections: h.counted,
                    left: until - now,
                    new: false,
                };
            }
            // The hold is over: a fresh start.
            *h = History::default();
        }
        while h
            .corrections
            .front()
            .is_some_and(|t| now.duration_since(*t) >= FIGHT_WINDOW)
        {
            h.corrections.pop_front();
        }
        h.corrections.push_back(now);
        if h.corrections.len() < FIGHT_THRESHOLD {
            return Verdict::Correct;
        }
        h.counted = h.corrections.len() - 1;
        h.held_until = Some(now + FIGHT_HOLD);
        h.manager = manager.map(str::to_string);
        Verdict::Hold {
            manager: h.manager.clone(),
            corrections: h.counted,
            left: FIGHT_HOLD,
            new: true,
        }
    }

    /// Objects with a drift history.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether no object has one.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

/// The field manager that last wrote an object's main resource other than capstan (status
/// writes excluded): who changed what capstan owns, as far as the object tells.
pub fn other_manager(obj: &Value) -> Option<String> {
    obj.pointer("/metadata/managedFields")?
        .as_array()?
        .iter()
        .filter(|e| {
            let s = |k: &str| e.get(k).and_then(Value::as_str);
            s("manager").is_some_and(|m| m != FIELD_MANAGER)
                && s("subresource").is_none_or(str::is_empty)
        })
        // RFC 3339 times of one server compare as strings.
        .max_by_key(|e| e.get("time").and_then(Value::as_str).unwrap_or(""))
        .and_then(|e| e.get("manager").and_then(Value::as_str))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_one_off_edit_is_corrected_a_fight_is_held() {
        let t = Instant::now();
        let mut f = Fights::default();
        assert_eq!(f.drifted("md", Some("kubectl-edit"), t), Verdict::Correct);
        assert_eq!(
            f.drifted("md", Some("rival"), t + Duration::from_secs(1)),
            Verdict::Correct
        );
        // Another object's drift is its own.
        assert_eq!(f.drifted("cm", None, t), Verdict::Correct);
        let third = f.drifted("md", Some("rival"), t + Duration::from_secs(2));
        assert_eq!(
            third,
            Verdict::Hold {
                manager: Some("rival".into()),
                corrections: 2,
                left: FIGHT_HOLD,
                new: true
            }
        );
        // Held: still a conflict, no longer new.
        match f.drifted("md", None, t + Duration::from_secs(62)) {
            Verdict::Hold {
                manager, left, new, ..
            } => {
                assert_eq!(manager.as_deref(), Some("rival"));
                assert_eq!(left, FIGHT_HOLD - Duration::from_secs(60));
                assert!(!new);
            }
            v => panic!("{v:?}"),
        }
        // After the hold: corrected again, counting afresh.
        let later = t + Duration::from_secs(2) + FIGHT_HOLD;
        assert_eq!(f.drifted("md", Some("rival"), later), Verdict::Correct);
    }

    #[test]
    fn corrections_outside_the_window_are_not_a_fight() {
        let t = Instant::now();
        let mut f = Fights::default();
        for i in 0..10u32 {
            // One hand edit every eleven minutes.
            assert_eq!(
                f.drifted(
                    "md",
                    Some("kubectl-edit"),
                    t + FIGHT_WINDOW * i + Duration::from_secs(60 * u64::from(i))
                ),
                Verdict::Correct,
                "edit {i}"
            );
        }
        assert_eq!(f.len(), 1, "only the drifting object is remembered");
        let _ = f.drifted("other", None, t + FIGHT_WINDOW * 30);
        assert_eq!(f.len(), 1, "the old history aged out");
    }

    #[test]
    fn the_other_manager_is_the_last_writer_of_the_main_resource() {
        let obj = json!({"metadata": {"managedFields": [
            {"manager": "capstan", "operation": "Apply", "time": "2026-11-24T10:00:05Z"},
            {"manager": "rival", "operation": "Apply", "time": "2026-11-24T10:00:03Z"},
            {"manager": "kubectl-edit", "operation": "Update", "time": "2026-11-24T10:00:01Z"},
            {"manager": "capi", "operation": "Update", "subresource": "status", "time": "2026-11-24T10:00:09Z"}
        ]}});
        assert_eq!(other_manager(&obj).as_deref(), Some("rival"));
        assert_eq!(other_manager(&json!({"metadata": {}})), None);
    }
}
