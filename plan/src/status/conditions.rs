//! The words capstan writes to the API server to say why: condition types, statuses and
//! reasons, typed.
//!
//! A reason is what alerts, dashboards and `kubectl wait --for` match on, and what the tests
//! read back: a misspelt or reworded one breaks them silently. So every reason capstan writes
//! is a [`Reason`] with one spelling, in one place ([`Reason::as_str`]), and the API server's
//! rule for a condition's reason (CamelCase, `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`) is
//! tested for all of them. What is read back from the API server stays text: the conditions of
//! other controllers (Cluster API's), and the tenancy policy's denials as the server words them.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// A condition type of a ManagedCluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConditionType {
    /// Converged at the revision (False: why not yet; Unknown: held or orphaned).
    Ready,
    /// Every object of the cluster is applied.
    Applied,
    /// capstan does not own something it must write (another field manager, an object that is
    /// not the cluster's).
    Conflict,
    /// With `--verify-commits`: the revision followed verified (False: the newest was refused,
    /// and an older verified revision is what is applied).
    Verified,
    /// A workload cluster's add-ons are applied inside it and healthy (False: waiting for the
    /// cluster, rolling out, or failed; absent when it has none).
    AddonsReady,
}

impl ConditionType {
    /// The type as written.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionType::Ready => "Ready",
            ConditionType::Applied => "Applied",
            ConditionType::Conflict => "Conflict",
            ConditionType::Verified => "Verified",
            ConditionType::AddonsReady => "AddonsReady",
        }
    }
}

impl fmt::Display for ConditionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A condition's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConditionStatus {
    /// It holds.
    True,
    /// It does not.
    False,
    /// capstan cannot tell (the cluster is held or orphaned).
    Unknown,
}

impl ConditionStatus {
    /// The status as written.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

impl fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Declares [`Reason`]: each variant with the text written for it.
macro_rules! reasons {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// Every reason.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The reason as written.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }
    };
}

reasons! {
    /// Why: a reason capstan writes, as a ManagedCluster condition's reason, an Event's reason,
    /// or the first word of a tenancy policy denial.
    Reason {
        // Converged, or on its way (health, the stages).
        /// Cluster API reports the cluster Available, rolled out at the revision.
        Available => "Available",
        /// Applied; Cluster API or a stage is not done yet.
        Progressing => "Progressing",
        /// A cluster applied before at another revision is rolling out stage by stage.
        Upgrading => "Upgrading",
        /// Rolled out; prunes wait for the next pass.
        Pruning => "Pruning",
        /// Fewer machines than desired.
        ScalingUp => "ScalingUp",
        /// More machines than desired.
        ScalingDown => "ScalingDown",
        /// Machines of an older template remain, or not every machine is up to date.
        RollingOut => "RollingOut",
        /// The workload API server does not answer (Cluster API's `RemoteConnectionProbe`).
        Unreachable => "Unreachable",
        /// Cluster API is paused on the cluster (`spec.paused`, set outside capstan): it acts on
        /// nothing and reports nothing until unpaused.
        Paused => "Paused",
        /// Being deleted (the cluster on its tombstone, or objects pruned).
        Deleting => "Deleting",
        // Held: nothing applied (the gate).
        /// Suspended in the repository.
        Suspended => "Suspended",
        /// Its management cluster upgrades itself.
        ManagementUpgrading => "ManagementUpgrading",
        // Held before its upgrade started (the fleet's pacing, the health gate).
        /// A cluster of its wave or an earlier one failed.
        WaveStopped => "WaveStopped",
        /// The waves before are not Ready at the revision (or not started).
        WaitingForWave => "WaitingForWave",
        /// Outside every maintenance window.
        OutsideMaintenanceWindow => "OutsideMaintenanceWindow",
        /// `maxUnavailable` clusters are upgrading.
        MaxUnavailable => "MaxUnavailable",
        /// An earlier upgrade is still rolling (the health gate).
        WaitingForHealth => "WaitingForHealth",
        /// A bare-metal rolling upgrade lacks spare Hardware.
        WaitingForHardware => "WaitingForHardware",
        // The revision refused for the cluster: nothing of it applied.
        /// The cluster's directory does not validate.
        ValidationFailed => "ValidationFailed",
        /// A tombstone for the management cluster the agent runs on.
        DeletionRefused => "DeletionRefused",
        /// The agent may not read a kind of the cluster's objects (RBAC).
        Forbidden => "Forbidden",
        /// The Kubernetes version change is not one EKS Anywhere upgrades.
        UpgradeRefused => "UpgradeRefused",
        /// A Secret of its directory kept encrypted with SOPS does not decrypt (no identity, a
        /// key that is not a recipient, a changed file).
        DecryptionFailed => "DecryptionFailed",
        /// A field EKS Anywhere holds immutable would change.
        ImmutableField => "ImmutableField",
        /// The live EKS-A objects could not be read.
        ReadFailed => "ReadFailed",
        /// An object exists and is not the cluster's (also the tenancy policy's denial of it).
        AlreadyExists => "AlreadyExists",
        // Failed while applying or rolling out.
        /// Applying or pruning failed.
        ApplyFailed => "ApplyFailed",
        /// A management cluster's upgrade of itself could not be prepared (backup, pause).
        UpgradeFailed => "UpgradeFailed",
        /// A stage has made no progress within the stage timeout.
        StageTimedOut => "StageTimedOut",
        /// Another field manager keeps changing fields capstan owns (Ready's reason).
        Conflict => "Conflict",
        /// Another field manager keeps changing fields capstan owns (the Conflict condition's).
        FieldManagerConflict => "FieldManagerConflict",
        // The rest of the lifecycle.
        /// Applied before, gone from the repository without a tombstone.
        Orphaned => "Orphaned",
        /// Every object applied (the Applied condition; the Event of a pass that applied).
        Applied => "Applied",
        /// A pass failed (its Event).
        ReconcileFailed => "ReconcileFailed",
        // Add-ons (inside a workload cluster).
        /// The add-ons wait for the workload cluster: no kubeconfig from Cluster API yet, its
        /// API server does not answer, or no node is Ready (its CNI is not up).
        WaitingForCluster => "WaitingForCluster",
        /// The add-ons are applied; some are not rolled out yet.
        AddonsProgressing => "AddonsProgressing",
        /// An add-on could not be applied or pruned, or failed (a Job, a rollout past its
        /// deadline); or the cluster's kubeconfig is one capstan refuses to use.
        AddonsFailed => "AddonsFailed",
        // Commit signatures (`--verify-commits`).
        /// The revision applied is signed by a trusted key.
        SignatureVerified => "SignatureVerified",
        /// The newest revision is refused: unsigned, a bad signature or an untrusted key.
        UnverifiedRevision => "UnverifiedRevision",
        /// The newest revision is refused: it does not descend from the last verified commit
        /// (the branch was moved back), and no admin allowed a rollback.
        RollbackRefused => "RollbackRefused",
        // The tenancy policy's denials (the first word of its message).
        /// Written without the identity's cluster.
        NoCluster => "NoCluster",
        /// Not labelled for the identity's cluster.
        Unlabelled => "Unlabelled",
        /// A workload identity's object not named for its cluster.
        OutsideCluster => "OutsideCluster",
        /// A workload identity's object in a reserved namespace.
        ReservedNamespace => "ReservedNamespace",
        /// A reference to another cluster's object.
        ForeignReference => "ForeignReference",
        /// A selector that does not require the cluster's own name.
        ForeignSelector => "ForeignSelector",
        /// A workload identity's write of a kind or version the reference table does not hold.
        UncheckedKind => "UncheckedKind",
        /// A workload's Secret of a type, or with an annotation, a controller fills in.
        FillableSecret => "FillableSecret",
        /// A workload's Secret or ConfigMap named as controllers name another cluster's, or a
        /// cluster named so that its generated names are another's.
        ReservedName => "ReservedName",
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A condition as the pass computes it; the writer keeps its transition time when its status
/// did not change.
pub fn condition(
    type_: ConditionType,
    status: ConditionStatus,
    reason: Reason,
    message: &str,
) -> Condition {
    Condition {
        type_: type_.as_str().into(),
        status: status.as_str().into(),
        reason: reason.as_str().into(),
        message: message.into(),
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        observed_generation: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kubernetes' rule for a condition's reason (`metav1.Condition`), by hand:
    /// `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`.
    fn valid(reason: &str) -> bool {
        let b = reason.as_bytes();
        let (Some(first), Some(last)) = (b.first(), b.last()) else {
            return false;
        };
        first.is_ascii_alphabetic()
            && (last.is_ascii_alphanumeric() || *last == b'_')
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b',' | b':'))
    }

    #[test]
    fn every_reason_is_spelt_once_and_as_kubernetes_takes_it() {
        let mut seen = std::collections::BTreeSet::new();
        for &r in Reason::ALL {
            let s = r.as_str();
            assert!(valid(s), "{s}: not a condition reason");
            assert!(
                s.starts_with(|c: char| c.is_ascii_uppercase()),
                "{s}: not CamelCase"
            );
            assert!(!s.contains('_'), "{s}: not CamelCase");
            assert!(seen.insert(s), "{s}: twice");
            assert_eq!(s, format!("{r:?}"), "the variant is named as written");
            assert_eq!(s, r.to_string());
        }
        assert!(!valid("") && !valid("1Ready") && !valid("Ready:") && !valid("Not ready"));
        for t in [
            ConditionType::Ready,
            ConditionType::Applied,
            ConditionType::Conflict,
            ConditionType::Verified,
            ConditionType::AddonsReady,
        ] {
            assert!(valid(t.as_str()), "{t}");
        }
    }

    #[test]
    fn a_condition_is_written_as_text() {
        let c = condition(
            ConditionType::Ready,
            ConditionStatus::Unknown,
            Reason::WaitingForWave,
            "waits",
        );
        assert_eq!(
            (
                c.type_.as_str(),
                c.status.as_str(),
                c.reason.as_str(),
                c.message.as_str()
            ),
            ("Ready", "Unknown", "WaitingForWave", "waits")
        );
    }
}
