//! The command line, as clap types. Flag names follow kubectl and clusterctl where they overlap.

use std::path::PathBuf;

use capstan_layout::scaffold::codeowners::Owner;
use clap::{Args, Parser, Subcommand, ValueEnum};

/// capstan: a GitOps agent for Cluster API fleets written as EKS Anywhere specs.
#[derive(Debug, Parser)]
#[command(name = "capstan", version, about, propagate_version = true)]
pub struct Cli {
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Output {
    /// Human-readable text.
    #[default]
    Text,
    /// JSON, for scripts and CI.
    Json,
}

/// Output format of change reports (`capstan diff`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum ReportOutput {
    /// Human-readable text, coloured on a terminal (unless NO_COLOR is set).
    #[default]
    Text,
    /// JSON, for scripts and CI.
    Json,
    /// GitHub-flavoured markdown, for a pull-request comment (at most 65,536 characters).
    Markdown,
}

/// `--provider`: the providers capstan has a descriptor for ([`capstan_templates::provider`]).
fn provider_parser() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(capstan_templates::provider::names())
}

/// Commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check the whole fleet repository: layout, specs, versions, CIDRs, tenancy. Exits 1 on errors.
    Validate {
        /// The repository (a working copy).
        #[arg(default_value = ".")]
        repo: PathBuf,
        /// Output format.
        #[arg(long, short, value_enum, default_value_t)]
        output: Output,
        /// Also ask the management cluster's API server to admit every rendered object
        /// (server-side apply in dry-run mode with strict field validation; nothing is persisted).
        #[arg(long)]
        server_dry_run: bool,
        /// Connection.
        #[command(flatten)]
        kube: KubeArgs,
    },
    /// Print or write the Cluster API and EKS Anywhere objects of the fleet.
    Render {
        /// The repository.
        #[arg(default_value = ".")]
        repo: PathBuf,
        /// Only this cluster.
        #[arg(long)]
        cluster: Option<String>,
        /// Write one file per cluster into this directory instead of printing.
        #[arg(long)]
        output_dir: Option<PathBuf>,
    },
    /// Write a new fleet repository with a management cluster.
    Init(InitArgs),
    /// Show what applying the repository would do: create/update/unchanged/prune/skip per object,
    /// with diffs. Exits 0 when nothing would change, 2 when something would, 1 on errors.
    Plan {
        /// The repository.
        #[arg(default_value = ".")]
        repo: PathBuf,
        /// Only this cluster.
        #[arg(long)]
        cluster: Option<String>,
        /// The management cluster this is (default: the repository's only one).
        #[arg(long)]
        management: Option<String>,
        /// Output format.
        #[arg(long, short, value_enum, default_value_t)]
        output: Output,
        /// Upgrades (what a run would do).
        #[command(flatten)]
        upgrade: UpgradeArgs,
        /// Commit signatures: with --verify-commits, the HEAD commit is verified and planned
        /// (its tree, not the working copy's edits).
        #[command(flatten)]
        verify: VerifyArgs,
        /// Connection.
        #[command(flatten)]
        kube: KubeArgs,
    },
    /// Show what a change of the repository does, without a cluster: validate and render two
    /// revisions, and print per changed cluster the objects created, changed and deleted with
    /// diffs and what happens to its machines (rollouts, scaling, add-on upgrades, blocked
    /// fields). Exits 0 when nothing changes, 2 when something does, 1 on errors.
    Diff(DiffArgs),
    /// Rehearse a change on the real Cluster API controllers before it merges: the clusters it
    /// touches are brought up at the base revision on a local control plane where CAPD's
    /// in-memory backend simulates machines (`capstan dev up`'s, started when not running),
    /// then changed to the head revision through the agent's own pass and followed stage by
    /// stage. Prints a timeline per cluster. Exits 0 when every cluster reached Ready at the
    /// new revision with its stages in order (a tombstone: deleted), 1 when one did not, 2 on
    /// bad input (what `validate` and `diff` refuse).
    #[cfg(feature = "dev")]
    Rehearse(RehearseArgs),
    /// The agent: follow a Git repository (or a working copy) and keep the management cluster in
    /// line with it, on a poll interval, on GitHub push webhooks and (working copies) on edits.
    Run(Box<RunArgs>),
    /// Reconcile the repository against the management cluster.
    Reconcile(ReconcileArgs),
    /// Install the agent on the management cluster: Namespace capstan-system, the ManagedCluster
    /// CRD, a ServiceAccount with least-privilege RBAC, a Service and a Deployment (two replicas,
    /// leader election). Re-running updates it. With --export, print the YAML instead.
    Install(InstallArgs),
    /// Remove the agent and its rights; managed clusters are not touched, nor (without --purge)
    /// the status records.
    Uninstall {
        /// Also remove the ManagedCluster CRD (and so every status record and inventory) and the
        /// capstan-system namespace.
        #[arg(long)]
        purge: bool,
        /// Connection.
        #[command(flatten)]
        kube: KubeArgs,
    },
    /// Set a fleet repository up and the agent on the management cluster, as `flux bootstrap
    /// git` does: an empty repository gets the fleet skeleton (`capstan init`), the agent's
    /// install manifests are committed and pushed, applied, the Git credentials Secret is created
    /// from the deploy key, and bootstrap waits until the agent reports its first applied
    /// revision.
    Bootstrap(BootstrapArgs),
    /// Serve the fleet dashboard on this machine, read with your kubeconfig (Kubernetes RBAC
    /// decides what it shows), on loopback; prints its link, which carries a secret of this run
    /// (only a browser that opened it gets in) and opens a browser on it.
    Dashboard {
        /// Where to listen (loopback unless you mean otherwise, and then it warns: anyone who
        /// reaches the address and learns the link reads what your kubeconfig can; port 0 picks
        /// a free one).
        #[arg(long, default_value = "127.0.0.1:8480")]
        addr: std::net::SocketAddr,
        /// The fleet repository's URL, for links to commits (GitHub, GitLab, Bitbucket).
        #[arg(long)]
        repo: Option<String>,
        /// Do not try to open a browser.
        #[arg(long)]
        no_browser: bool,
        /// Connection.
        #[command(flatten)]
        kube: KubeArgs,
    },
    /// Print a workload cluster's kubeconfig, read with your kubeconfig from the Secret Cluster
    /// API writes for it (`<CLUSTER>-kubeconfig`), as `clusterctl get kubeconfig` does; with
    /// --merge, add it to your kubeconfig file as a context instead.
    Kubeconfig(KubeconfigArgs),
    /// Show the status of every managed cluster.
    Status {
        /// Output format.
        #[arg(long, short, value_enum, default_value_t)]
        output: Output,
        /// Connection.
        #[command(flatten)]
        kube: KubeArgs,
    },
    /// Delete a cluster: write a tombstone into the repository (the agent deletes it once merged).
    Delete {
        /// What to delete.
        #[command(subcommand)]
        what: TargetCommand,
    },
    /// Suspend reconciliation of a cluster or the whole fleet (recorded in the repository).
    Suspend {
        /// What to suspend.
        #[command(subcommand)]
        what: TargetCommand,
    },
    /// Resume reconciliation of a cluster or the whole fleet.
    Resume {
        /// What to resume.
        #[command(subcommand)]
        what: TargetCommand,
    },
    /// Write a backup of every Cluster API, EKS Anywhere and capstan object of the management
    /// cluster, and the Secrets of its clusters, into a new directory (what capstan does by
    /// itself before a management cluster upgrades its own etcd or control plane).
    Backup {
        /// Where to create the backup's directory.
        #[arg(long, default_value_os_t = default_backup_dir())]
        dir: PathBuf,
        /// How it is encrypted.
        #[command(flatten)]
        encryption: BackupEncryptionArgs,
        /// Connection.
        #[command(flatten)]
        kube: KubeArgs,
    },
    /// Re-create the objects of a backup (`capstan backup`, or the one taken before a
    /// management cluster upgraded itself) on the cluster given: owners first, Clusters paused
    /// until everything is back, statuses restored. Objects that exist are left as they are.
    Restore {
        /// The backup's directory.
        #[arg(long)]
        from: PathBuf,
        /// An age identity file (`AGE-SECRET-KEY-1…` lines, as age-keygen writes it) holding the
        /// secret key of one of the backup's recipients: required for an encrypted backup.
        #[arg(long, value_name = "FILE")]
        identity: Option<PathBuf>,
        /// Connection.
        #[command(flatten)]
        kube: KubeArgs,
    },
    /// Move Cluster API clusters, whole, from the management cluster given (--kubeconfig,
    /// --context) to another (--to): what belongs to each (owned or not: kubeconfig, CAs, keys,
    /// credentials, EKS-A specs, ClusterResourceSets, capstan's records) is paused, copied with
    /// new owner references, deleted at the source and unpaused in the target. A journal in the
    /// target lets the same command resume after a crash at any step.
    Move {
        /// A cluster to move, NAMESPACE/NAME (repeatable).
        #[arg(long = "cluster", value_name = "NAMESPACE/NAME", required = true)]
        clusters: Vec<capstan_plan::moving::ClusterKey>,
        /// The target's kubeconfig.
        #[arg(long, value_name = "KUBECONFIG")]
        to: PathBuf,
        /// The context of the target's kubeconfig (default: its current context).
        #[arg(long, value_name = "CONTEXT")]
        to_context: Option<String>,
        /// Show what would move (objects by kind, in order) and what would refuse it; change
        /// nothing.
        #[arg(long)]
        dry_run: bool,
        /// The source.
        #[command(flatten)]
        kube: KubeArgs,
    },
    /// A management cluster from its directory in Git: created on a bootstrap cluster
    /// (--kubeconfig: `capstan dev up`'s, or kind with `clusterctl init`) by capstan's own pass,
    /// capstan installed into it, every object moved onto it (`capstan move`), and capstan there
    /// taking over from Git. Running it again resumes wherever a run stopped.
    Pivot(Box<PivotArgs>),
    /// A management cluster that manages itself taken down, driven by the tombstone in its
    /// directory (and one in each of its workload directories): capstan's agent in it stopped,
    /// everything moved onto a temporary cluster (--to), and there the workload clusters
    /// deleted first and the management cluster last, in Cluster API's order. Running it again
    /// resumes wherever a run stopped.
    BackOut(Box<BackOutArgs>),
    /// A local management cluster for trying capstan without one (the `dev` feature, on by
    /// default: it builds the test control plane; an agent's image is built without it).
    #[cfg(feature = "dev")]
    Dev {
        /// Up or down.
        #[command(subcommand)]
        what: DevCommand,
    },
    /// Create things in a fleet repository.
    New {
        /// What to create.
        #[command(subcommand)]
        what: NewCommand,
    },
    /// Secrets kept in the repository, encrypted with SOPS.
    Secret {
        /// What to do.
        #[command(subcommand)]
        what: SecretCommand,
    },
    /// A bare-metal inventory kept in the repository.
    Hardware {
        /// What to do.
        #[command(subcommand)]
        what: HardwareCommand,
    },
}

/// `capstan hardware ...`.
#[derive(Debug, Subcommand)]
pub enum HardwareCommand {
    /// Write EKS Anywhere's hardware CSV into a management cluster's directory: a Hardware per
    /// row (and a Rufio Machine for its BMC) in `hardware-<name>.yaml`, the BMC credentials
    /// encrypted with SOPS for the fleet's age recipients in `hardware-<name>-bmc.sops.yaml`.
    /// The passwords never reach the disk in plain text. Every row is checked first (each
    /// problem named with its line); nothing is written unless all pass.
    Import(HardwareImportArgs),
}

/// `capstan hardware import`.
#[derive(Debug, Args)]
pub struct HardwareImportArgs {
    /// The CSV (hostname, bmc_ip, bmc_username, bmc_password, mac, ip_address, netmask,
    /// gateway, nameservers, labels, disk, and optionally vlan_id).
    pub file: PathBuf,
    /// The fleet repository.
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// The management cluster whose directory gets the inventory (its Tinkerbell stack).
    #[arg(long)]
    pub management: String,
    /// Label every Hardware `cluster.x-k8s.io/cluster-name: CLUSTER`: the Hardware a workload
    /// cluster's machines may take.
    #[arg(long)]
    pub cluster: Option<String>,
    /// The namespace of the Hardware (the one the clusters' machines are in).
    #[arg(long, default_value = capstan_templates::spec::DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// The files' name part (default: the CSV's file name without `.csv`).
    #[arg(long)]
    pub name: Option<String>,
    /// Encrypt for this age recipient (`age1…`; repeatable) instead of the recipients of the
    /// management cluster's fleet.yaml (`spec.sops.ageRecipients`).
    #[arg(long = "age", value_name = "AGE_PUBLIC_KEY", value_parser = crate::backup::encryption::parse_recipient)]
    pub recipients: Vec<age::x25519::Recipient>,
}

/// `capstan secret ...`.
#[derive(Debug, Subcommand)]
pub enum SecretCommand {
    /// Encrypt an add-on Secret's data with SOPS for the fleet's age recipients, as `sops encrypt
    /// --encrypted-regex '^(data|stringData)$'` would (a file `sops` decrypts and edits), naming
    /// where it may be decrypted (the annotation capstan.dev/encrypted-for, from the file's
    /// place). Needs no key: only the recipients' public keys. Prints the file, or rewrites it.
    Encrypt(SecretEncryptArgs),
}

/// `capstan secret encrypt`.
#[derive(Debug, Args)]
pub struct SecretEncryptArgs {
    /// The file: one or more Secrets in YAML, under a cluster's `addons/` or a shared set's
    /// directory of a fleet repository.
    pub file: PathBuf,
    /// Encrypt for this age recipient (`age1…`; repeatable) instead of the recipients of the
    /// management cluster's fleet.yaml (`spec.sops.ageRecipients`).
    #[arg(long = "age", value_name = "AGE_PUBLIC_KEY", value_parser = crate::backup::encryption::parse_recipient)]
    pub recipients: Vec<age::x25519::Recipient>,
    /// Rewrite the file instead of printing the encrypted one.
    #[arg(long)]
    pub in_place: bool,
}

pub use crate::backup::default_backup_dir;

/// How upgrades are applied ([`crate::plan::stages`], [`crate::plan::chain`]).
#[derive(Debug, Args, Clone)]
pub struct UpgradeArgs {
    /// Refuse a control-plane jump of several Kubernetes minors instead of applying it as a
    /// chain of one-minor steps.
    #[arg(long)]
    pub no_chain: bool,
    /// A stage (etcd, control plane, CNI, a worker group) that has made no progress (no machine
    /// created, available or removed, no next group started) for this long fails the cluster:
    /// later stages stay held, and a management cluster's workload clusters stay paused.
    #[arg(long, default_value = "1h", value_parser = parse_interval)]
    pub stage_timeout: std::time::Duration,
    /// Where a management cluster's backup goes before it upgrades its own etcd or control
    /// plane.
    #[arg(long, default_value_os_t = default_backup_dir())]
    pub backup_dir: PathBuf,
    /// How that backup is encrypted.
    #[command(flatten)]
    pub backup_encryption: BackupEncryptionArgs,
    /// The Secret holding the age identities SOPS-encrypted add-ons are decrypted with (every
    /// key ending in `.agekey`, one `AGE-SECRET-KEY-1…` per line), read when a pass applies an
    /// encrypted add-on; the decrypted values stay in memory
    /// [default: capstan-system/capstan-sops-age].
    #[arg(long, value_name = "NAMESPACE/NAME", value_parser = parse_secret_ref)]
    pub sops_age_secret: Option<(String, String)>,
}

impl UpgradeArgs {
    /// Sets these in reconcile options.
    pub fn apply(&self, opts: &mut crate::reconcile::Options) {
        opts.sops_age_secret = self.sops_age_secret.clone();
        opts.no_chain = self.no_chain;
        opts.stage_timeout = Some(self.stage_timeout);
        opts.backup_dir = Some(self.backup_dir.clone());
        opts.backup_encryption = self.backup_encryption.encryption();
    }
}

/// How backups are encrypted ([`crate::backup::encryption`]): to the age recipients of a
/// Secret (the default), to recipients given, or — chosen explicitly — not at all.
#[derive(Debug, Args, Clone, Default)]
pub struct BackupEncryptionArgs {
    /// Encrypt backups to the age recipients of this Secret (key `recipients`, one public key
    /// `age1…` per line), read before each backup [default:
    /// capstan-system/capstan-backup-recipients]. Without recipients no backup is written (and a
    /// management cluster's upgrade of itself waits).
    #[arg(long, value_name = "NAMESPACE/NAME", value_parser = parse_secret_ref)]
    pub backup_recipients_secret: Option<(String, String)>,
    /// Encrypt backups to this age recipient (`age1…`) instead of the Secret's. Repeatable.
    #[arg(long, value_name = "AGE_PUBLIC_KEY", value_parser = crate::backup::encryption::parse_recipient, conflicts_with = "backup_recipients_secret")]
    pub backup_recipient: Vec<age::x25519::Recipient>,
    /// Write backups unencrypted: every cluster's CA, etcd and service-account keys and admin
    /// kubeconfig in plain JSON, readable by whoever reads the backup volume, its snapshots or
    /// the disk behind it.
    #[arg(long, conflicts_with_all = ["backup_recipients_secret", "backup_recipient"])]
    pub backup_plaintext: bool,
}

impl BackupEncryptionArgs {
    /// What these say.
    pub fn encryption(&self) -> crate::backup::Encryption {
        use crate::backup::Encryption;
        if self.backup_plaintext {
            Encryption::Plaintext
        } else if !self.backup_recipient.is_empty() {
            Encryption::To(self.backup_recipient.clone())
        } else if let Some((namespace, name)) = &self.backup_recipients_secret {
            Encryption::Secret {
                namespace: namespace.clone(),
                name: name.clone(),
            }
        } else {
            Encryption::default()
        }
    }
}

/// `NAMESPACE/NAME` of a Secret.
pub fn parse_secret_ref(s: &str) -> Result<(String, String), String> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_string(), name.to_string()))
        }
        _ => Err(format!("`{s}` is not NAMESPACE/NAME")),
    }
}

/// `capstan install`.
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// Print the manifests instead of applying them.
    #[arg(long)]
    pub export: bool,
    /// Only the ManagedCluster CRD (with --export: how agent/manifests/ is regenerated).
    #[arg(long)]
    pub crd_only: bool,
    /// What the agent follows.
    #[command(flatten)]
    pub agent: AgentArgs,
    /// How long to wait for the CRD to be Established (and, with --cluster-api, for the
    /// components' Deployments to be Available).
    #[arg(long, default_value = "2m", value_parser = parse_interval)]
    pub wait: std::time::Duration,
    /// First install what runs a management cluster, as `clusterctl init` does: cert-manager,
    /// Cluster API, the management cluster's provider, etcdadm's providers and EKS Anywhere's
    /// controller, from the components manifests of the release its spec names (read from
    /// --checkout).
    #[arg(long)]
    pub cluster_api: bool,
    /// The fleet checkout (with --cluster-api).
    #[arg(long, default_value = ".")]
    pub checkout: PathBuf,
    /// With --cluster-api: the Cluster API Helm add-on provider's components manifest (EKS
    /// Anywhere's bundles do not name it): a path from the repository root, or an https URL
    /// pinned in the fleet config's release.pins.
    #[arg(long, value_name = "LOCATION")]
    pub addon_provider: Option<String>,
    /// With --cluster-api: how long the components' Deployments may take to be Available.
    #[arg(long, default_value = "10m", value_parser = parse_interval)]
    pub components_wait: std::time::Duration,
    /// Connection.
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// The agent's settings, shared by `install` and `bootstrap`.
#[derive(Debug, Args, Clone)]
pub struct AgentArgs {
    /// The fleet repository the agent follows (required, but for `install --crd-only`).
    #[arg(long)]
    pub repo: Option<String>,
    /// Its branch.
    #[arg(long, default_value = "main")]
    pub branch: String,
    /// The management cluster this is (required, but for `install --crd-only`).
    #[arg(long)]
    pub management: Option<String>,
    /// The agent's image.
    #[arg(long, default_value = crate::install::manifests::DEFAULT_IMAGE)]
    pub image: String,
    /// Poll interval.
    #[arg(long, default_value = "1m")]
    pub interval: String,
    /// Replicas (leader election picks the one that reconciles).
    #[arg(long, default_value_t = 2)]
    pub replicas: u32,
    /// A further kind the fleet's directories carry, which the agent may then manage:
    /// `RESOURCE` or `RESOURCE.GROUP` (e.g. configmaps, widgets.example.com). Repeatable.
    #[arg(long, value_name = "RESOURCE[.GROUP]")]
    pub allow: Vec<String>,
    /// The access mode of the volume backups are written to (a PersistentVolumeClaim):
    /// ReadWriteOnce (any storage; the replicas share the node it is attached to) or
    /// ReadWriteMany (the replicas spread over nodes).
    #[arg(long, default_value = "ReadWriteOnce", value_parser = ["ReadWriteOnce", "ReadWriteMany"])]
    pub backup_access_mode: String,
    /// The size of the backup volume.
    #[arg(long, default_value = "10Gi")]
    pub backup_size: String,
    /// The storage class of the backup volume (default: the cluster's default class).
    #[arg(long)]
    pub backup_storage_class: Option<String>,
    /// Serve the read-only dashboard from the agent on port 8480 of its Service
    /// (`kubectl -n capstan-system port-forward svc/capstan 8480`); every request needs a
    /// Kubernetes bearer token allowed to list ManagedClusters.
    #[arg(long)]
    pub dashboard: bool,
    /// Install the ClusterProfile CRD (multicluster.x-k8s.io, as SIG Multicluster's cluster
    /// inventory API v0.1.3 ships it) and have the agent keep one per workload cluster in
    /// NAMESPACE (`run --cluster-profiles`), with the rights to write them there and no wider.
    #[arg(long, value_name = "NAMESPACE")]
    pub cluster_profiles: Option<String>,
    /// Run the agent with `--verify-commits=WHICH` (`head`, the default, or `all`), reading its
    /// trusted keys from --trusted-keys-secret; the agent may `get` that Secret and no other.
    #[arg(long, value_enum, value_name = "WHICH", num_args = 0..=1, require_equals = true, default_missing_value = "head")]
    pub verify_commits: Option<VerifyCommits>,
    /// The Secret of trusted keys (keys `allowed_signers` and `trusted.asc`), created by the
    /// admin (default with --verify-commits: capstan-system/capstan-trusted-keys).
    #[arg(long, value_name = "NAMESPACE/NAME", requires = "verify_commits")]
    pub trusted_keys_secret: Option<String>,
    /// The Secret of the age recipients the agent encrypts its backups to (key `recipients`,
    /// one public key per line), created by the admin [default:
    /// capstan-system/capstan-backup-recipients]; the agent may `get` that Secret and holds no
    /// identity. Without it, a management cluster's upgrade of itself waits.
    #[arg(long, value_name = "NAMESPACE/NAME", value_parser = parse_secret_ref)]
    pub backup_recipients_secret: Option<(String, String)>,
    /// Have the agent write its backups unencrypted (`run --backup-plaintext`): whoever can
    /// read the backup volume, its snapshots or the disk behind it then holds every cluster's
    /// keys.
    #[arg(long, conflicts_with = "backup_recipients_secret")]
    pub backup_plaintext: bool,
}

/// `capstan pivot`.
#[derive(Debug, Args)]
pub struct PivotArgs {
    /// The fleet's working copy the management cluster is created from.
    #[arg(long, default_value = ".")]
    pub checkout: PathBuf,
    /// The new management cluster's kubeconfig (default: the one Cluster API writes for it on
    /// the bootstrap cluster, `<name>-kubeconfig`); for an API server reached otherwise, e.g.
    /// through a bastion.
    #[arg(long, value_name = "KUBECONFIG")]
    pub to: Option<PathBuf>,
    /// The context of --to (default: its current context).
    #[arg(long, value_name = "CONTEXT", requires = "to")]
    pub to_context: Option<String>,
    /// How long the management cluster may take to become Ready on the bootstrap cluster, and
    /// the agent to take over in it.
    #[arg(long, default_value = "30m", value_parser = parse_interval)]
    pub timeout: std::time::Duration,
    /// Show the steps and what would move, in order; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The Cluster API Helm add-on provider's components manifest, installed into a new cluster
    /// that has no Cluster API yet with the release's components (EKS Anywhere's bundles do not
    /// name it): a path from the repository root, or an https URL pinned in the fleet config.
    #[arg(long, value_name = "LOCATION")]
    pub addon_provider: Option<String>,
    /// How long the components installed into the new cluster may take to be Available.
    #[arg(long, default_value = "10m", value_parser = parse_interval)]
    pub components_wait: std::time::Duration,
    /// The agent installed into the new cluster: the repository it follows (ssh://, https://,
    /// git:// or a path), its branch, the management cluster (its directory's name).
    #[command(flatten)]
    pub agent: AgentArgs,
    /// The bootstrap cluster (default: the local control plane `capstan dev up` runs, when one
    /// runs; else $KUBECONFIG, ~/.kube/config).
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// `capstan back-out`.
#[derive(Debug, Args)]
pub struct BackOutArgs {
    /// The fleet's working copy: the management directory's tombstone, and its workload
    /// directories' (every one must have one).
    #[arg(long, default_value = ".")]
    pub checkout: PathBuf,
    /// The management cluster, by its directory's name (default: the checkout's only one).
    #[arg(long)]
    pub management: Option<String>,
    /// The temporary cluster the clusters are moved to and deleted from (kind with `clusterctl
    /// init`, or `capstan dev up`'s): it must run Cluster API and the provider's controllers.
    #[arg(long, value_name = "KUBECONFIG")]
    pub to: PathBuf,
    /// The context of --to (default: its current context).
    #[arg(long, value_name = "CONTEXT")]
    pub to_context: Option<String>,
    /// How long the agent may take to stop, and each deletion to finish.
    #[arg(long, default_value = "30m", value_parser = parse_interval)]
    pub timeout: std::time::Duration,
    /// Show the steps and what would move, in order; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The management cluster.
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// `capstan bootstrap`.
#[derive(Debug, Args)]
pub struct BootstrapArgs {
    /// The agent: repository (ssh://, https://, git:// or a path), branch, management cluster.
    #[command(flatten)]
    pub agent: AgentArgs,
    /// The deploy key the agent reads the repository with (and bootstrap pushes with), for
    /// ssh:// repositories; it goes into the Secret capstan-git.
    #[arg(long)]
    pub ssh_key: Option<PathBuf>,
    /// known_hosts for the repository's host (default: asked with ssh-keyscan).
    #[arg(long)]
    pub known_hosts: Option<PathBuf>,
    /// Where the install manifests are committed in the repository.
    #[arg(long, default_value = "capstan-system")]
    pub path: String,
    /// How long to wait for the agent's first applied revision.
    #[arg(long, default_value = "5m", value_parser = parse_interval)]
    pub timeout: std::time::Duration,
    /// The management cluster's values, when the repository is empty and gets a skeleton.
    #[command(flatten)]
    pub values: BootstrapValues,
    /// Connection.
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// The values of a new management cluster (`capstan init`'s), when bootstrap writes one.
#[derive(Debug, Args, Clone)]
pub struct BootstrapValues {
    /// Provider of the management cluster.
    #[arg(long, value_parser = provider_parser())]
    pub provider: Option<String>,
    /// Pod CIDR.
    #[arg(long)]
    pub pod_cidr: Option<String>,
    /// Service CIDR.
    #[arg(long)]
    pub service_cidr: Option<String>,
    /// Namespace of the management cluster's objects.
    #[arg(long)]
    pub namespace: Option<String>,
    /// Docker clusters: `docker` or `in-memory`.
    #[arg(long, value_name = "BACKEND")]
    pub docker_backend: Option<String>,
    /// Control-plane endpoint address (vSphere).
    #[arg(long)]
    pub endpoint_host: Option<String>,
}

/// GitHub credentials and repository, shared by `run` and the `--open-pr` commands.
#[derive(Debug, Args, Clone, Default)]
pub struct GitHubArgs {
    /// File holding a GitHub token (fine-grained: pull requests and commit statuses read and
    /// write, contents and metadata read-only; the agent warns when it can push).
    #[arg(long, value_name = "FILE")]
    pub github_token_file: Option<PathBuf>,
    /// GitHub App id (with --github-app-key and --github-installation-id), instead of a token.
    #[arg(long, requires_all = ["github_app_key", "github_installation_id"], conflicts_with = "github_token_file")]
    pub github_app_id: Option<u64>,
    /// The GitHub App's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "github_app_id")]
    pub github_app_key: Option<PathBuf>,
    /// The GitHub App's installation id on the repository.
    #[arg(long, requires = "github_app_id")]
    pub github_installation_id: Option<u64>,
    /// GitHub API URL (GitHub Enterprise: https://HOST/api/v3).
    #[arg(long, default_value = crate::github::DEFAULT_API_URL)]
    pub github_api_url: String,
    /// The repository on GitHub, owner/name (default: read from the Git remote URL).
    #[arg(long, value_name = "OWNER/NAME")]
    pub github_repo: Option<String>,
}

impl GitHubArgs {
    /// The client these arguments describe, for the repository at `remote`; `None` without
    /// credentials.
    pub fn client(&self, remote: &str) -> anyhow::Result<Option<crate::github::GitHub>> {
        let app = match (
            &self.github_app_id,
            &self.github_app_key,
            self.github_installation_id,
        ) {
            (Some(id), Some(key), Some(inst)) => Some((*id, key, inst)),
            _ => None,
        };
        let Some(auth) = crate::github::auth_from_files(self.github_token_file.as_ref(), app)?
        else {
            return Ok(None);
        };
        let repo = match self
            .github_repo
            .clone()
            .or_else(|| crate::github::repo_from_url(remote))
        {
            Some(r) => r,
            None => anyhow::bail!(
                "cannot tell the GitHub repository from {remote}; name it with --github-repo OWNER/NAME"
            ),
        };
        Ok(Some(crate::github::GitHub::new(
            &crate::github::GitHubConfig {
                api_url: self.github_api_url.clone(),
                repo,
                auth,
                retry: crate::github::Retry::default(),
            },
        )?))
    }
}

/// Which cluster to talk to, as kubectl chooses it.
#[derive(Debug, Args, Clone, Default)]
pub struct KubeArgs {
    /// Path to a kubeconfig (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: the current context).
    #[arg(long, global = true)]
    pub context: Option<String>,
}

/// `capstan dev ...`.
#[cfg(feature = "dev")]
#[derive(Debug, Subcommand)]
pub enum DevCommand {
    /// Build (first time: minutes) and start a local management cluster: kube-apiserver and
    /// etcd with the Cluster API and EKS Anywhere CRDs installed, and the Cluster API controllers
    /// (core, kubeadm bootstrap and control plane, CAPD with its in-memory backend) with
    /// kube-controller-manager's garbage collector. Prints the kubeconfig path.
    Up {
        /// Where to keep its files (default: ~/.cache/capstan/dev).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Only the API server and its CRDs: no Cluster API controllers (clusters then stay
        /// Progressing; nothing acts on what capstan applies).
        #[arg(long)]
        no_controllers: bool,
    },
    /// Stop the local management cluster and remove its files.
    Down {
        /// Its directory (default: ~/.cache/capstan/dev).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

/// `--verify-commits=WHICH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum VerifyCommits {
    /// The head commit, the one applied.
    Head,
    /// Every commit since the last verified one (`capstan diff`: every commit from --base to
    /// --head).
    All,
}

/// Commit signature verification, shared by `run`, `plan` and `diff`.
#[derive(Debug, Args, Clone, Default)]
pub struct VerifyArgs {
    /// Refuse a revision unless its head commit (`head`, the default) or every commit since the
    /// last verified one (`all`) carries a good signature by a trusted key (SSH or OpenPGP).
    /// Unsigned commits, bad signatures, untrusted, expired and revoked keys are refused:
    /// nothing of the revision is applied and the last verified revision stays live.
    #[arg(long, value_enum, value_name = "WHICH", num_args = 0..=1, require_equals = true, default_missing_value = "head")]
    pub verify_commits: Option<VerifyCommits>,
    /// SSH signers trusted for commits, in ssh-keygen's allowed_signers format
    /// (`principals [namespaces="git",valid-after=…,valid-before=…] keytype key`).
    #[arg(long, value_name = "FILE", requires = "verify_commits")]
    pub allowed_signers: Option<std::path::PathBuf>,
    /// OpenPGP public keys trusted for commits (`gpg --armor --export KEY…`).
    #[arg(long, value_name = "FILE", requires = "verify_commits")]
    pub trusted_keys: Option<std::path::PathBuf>,
}

impl VerifyArgs {
    /// The mode, when verifying.
    pub fn mode(&self) -> Option<crate::source::verify::Mode> {
        self.verify_commits.map(|v| match v {
            VerifyCommits::Head => crate::source::verify::Mode::Head,
            VerifyCommits::All => crate::source::verify::Mode::All,
        })
    }

    /// The keys of the files given (for `plan` and `diff`); an error without any.
    pub fn keys(&self) -> anyhow::Result<crate::source::verify::TrustedKeys> {
        if self.allowed_signers.is_none() && self.trusted_keys.is_none() {
            anyhow::bail!(
                "--verify-commits needs trusted keys: --allowed-signers FILE and/or --trusted-keys FILE"
            );
        }
        Ok(crate::source::verify::TrustedKeys::from_files(
            self.allowed_signers.as_deref(),
            self.trusted_keys.as_deref(),
        )?)
    }
}

/// `capstan run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Git URL (https://, ssh://, git://) or a local path: a working copy is read as it is.
    #[arg(long)]
    pub repo: String,
    /// Branch to follow.
    #[arg(long, default_value = "main")]
    pub branch: String,
    /// Follow a tag instead of a branch.
    #[arg(long, conflicts_with = "commit")]
    pub tag: Option<String>,
    /// Pin a commit instead of following a branch.
    #[arg(long)]
    pub commit: Option<String>,
    /// Poll interval (e.g. 30s, 5m).
    #[arg(long, default_value = "1m", value_parser = parse_interval)]
    pub interval: std::time::Duration,
    /// The first retry's delay of a notification that failed (429 without Retry-After, 5xx,
    /// no answer), doubled for each of its five attempts.
    #[arg(long, default_value = "2s", value_parser = parse_interval)]
    pub notify_retry_backoff: std::time::Duration,
    /// Listen for GitHub push webhooks here (needs --webhook-secret-file or $CAPSTAN_WEBHOOK_SECRET).
    #[arg(long)]
    pub webhook_addr: Option<std::net::SocketAddr>,
    /// File holding the webhook secret.
    #[arg(long)]
    pub webhook_secret_file: Option<PathBuf>,
    /// Serve /metrics, /healthz and /readyz here.
    #[arg(long)]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Serve the read-only fleet dashboard here (off by default). Every request needs a
    /// Kubernetes bearer token whose user may list ManagedClusters in capstan-system (checked
    /// with a TokenReview and a SubjectAccessReview), sent as `Authorization: Bearer` or pasted
    /// once into the sign-in form (the browser then holds only a session's id).
    #[arg(long)]
    pub dashboard_addr: Option<std::net::SocketAddr>,
    /// Users reach the dashboard over HTTPS, TLS ending in front of the agent (an ingress): its
    /// sign-in cookie is then `Secure` and named `__Host-capstan_session`, so a browser never
    /// sends it over plain HTTP. The agent cannot tell this itself (it serves plain HTTP, and
    /// anyone can send X-Forwarded-Proto), so it is said here.
    #[arg(long, requires = "dashboard_addr")]
    pub dashboard_behind_tls: bool,
    /// Workload clusters reconciled at the same time.
    #[arg(long, default_value_t = 4, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    pub concurrency: usize,
    /// Treat --repo as a Git remote even when it is a local path.
    #[arg(long)]
    pub git: bool,
    /// With a working copy, reconcile on every edit.
    #[arg(long)]
    pub watch: bool,
    /// Where the Git mirror is kept (default ~/.cache/capstan/source/<hash of the URL>).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Deploy key for ssh:// remotes.
    #[arg(long)]
    pub ssh_key: Option<PathBuf>,
    /// known_hosts for ssh:// remotes.
    #[arg(long)]
    pub known_hosts: Option<PathBuf>,
    /// PEM file of CA certificates trusted for https:// remotes besides the system's roots.
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// The management cluster this is (default: the repository's only one).
    #[arg(long)]
    pub management: Option<String>,
    /// Correct drift (default) or only report it.
    #[arg(long, value_enum, default_value_t)]
    pub drift: DriftArg,
    /// Log as JSON.
    #[arg(long)]
    pub log_json: bool,
    /// Upgrades.
    #[command(flatten)]
    pub upgrade: UpgradeArgs,
    /// Run as one of several replicas: only the holder of a coordination.k8s.io Lease
    /// reconciles; the others serve probes, metrics and webhooks and take over when it goes.
    #[arg(long)]
    pub leader_elect: bool,
    /// The Lease's name.
    #[arg(long, default_value = crate::install::manifests::LEASE)]
    pub lease_name: String,
    /// The Lease's namespace (default: $POD_NAMESPACE, else capstan-system).
    #[arg(long)]
    pub lease_namespace: Option<String>,
    /// How long a leader's Lease lasts without renewal: a killed leader is replaced within it.
    #[arg(long, default_value = "15s", value_parser = parse_interval)]
    pub lease_duration: std::time::Duration,
    /// How long the leader may go without renewing its Lease before it stops writing and exits;
    /// shorter than --lease-duration, so it has stopped before another replica can lead
    /// (default: two thirds of the lease duration).
    #[arg(long, value_parser = parse_interval)]
    pub renew_deadline: Option<std::time::Duration>,
    /// GitHub: plans on pull requests and commit statuses.
    #[command(flatten)]
    pub github: GitHubArgs,
    /// Also plan pull requests whose head is in a fork (their specs are rendered and dry-run
    /// with the agent's credentials).
    #[arg(long)]
    pub pr_plans_from_forks: bool,
    /// Commit signatures (Git sources only): the keys are read again before every sync.
    #[command(flatten)]
    pub verify: VerifyArgs,
    /// A Secret with trusted keys (besides the files): its keys `allowed_signers` and
    /// `trusted.asc`, read again before every sync (rotating a key is editing the Secret).
    #[arg(long, value_name = "NAMESPACE/NAME", requires = "verify_commits")]
    pub trusted_keys_secret: Option<String>,
    /// With --verify-commits: also accept a head that does not descend from the last verified
    /// commit (a branch moved back to an older signed commit, or to another history). Off, such
    /// a head is refused as a rollback; to allow one rollback only, set the kept position
    /// (ConfigMap capstan-system/capstan-source) to the wanted commit instead.
    #[arg(long, requires = "verify_commits")]
    pub allow_rollback: bool,
    /// Keep a ClusterProfile (multicluster.x-k8s.io/v1alpha1, the cluster inventory API) for
    /// every workload cluster in this namespace: its health, version and kubeconfig Secret, for
    /// Argo CD, Open Cluster Management and other inventory consumers. Needs the CRD
    /// (`capstan install --cluster-profiles NAMESPACE`).
    #[arg(long, value_name = "NAMESPACE")]
    pub cluster_profiles: Option<String>,
    /// Connection.
    #[command(flatten)]
    pub kube: KubeArgs,
}

fn parse_interval(s: &str) -> Result<std::time::Duration, String> {
    capstan_templates::spec::parse_duration_seconds(s)
        .filter(|n| *n > 0)
        .map(std::time::Duration::from_secs)
        .ok_or_else(|| format!("`{s}` is not a duration such as 30s or 5m"))
}

/// Drift policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum DriftArg {
    /// Re-apply what the repository says.
    #[default]
    Correct,
    /// Only report it.
    Report,
}

/// `capstan delete|suspend|resume ...`.
#[derive(Debug, Subcommand)]
pub enum TargetCommand {
    /// One cluster.
    Cluster {
        /// Its name.
        name: String,
        /// The repository.
        #[arg(long, default_value = ".")]
        repo: PathBuf,
        /// Why (recorded in the file).
        #[arg(long, default_value = "")]
        reason: String,
        /// Open a pull request instead of writing into the working copy.
        #[command(flatten)]
        pr: PrArgs,
    },
    /// Every cluster of the repository (suspend/resume only).
    Fleet {
        /// The repository.
        #[arg(long, default_value = ".")]
        repo: PathBuf,
        /// Why (recorded in the file).
        #[arg(long, default_value = "")]
        reason: String,
        /// Open a pull request instead of writing into the working copy.
        #[command(flatten)]
        pr: PrArgs,
    },
}

/// `capstan reconcile`.
#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// Run one pass and exit (the daemon is `capstan run`).
    #[arg(long)]
    pub once: bool,
    /// After the pass, keep reconciling as Cluster API acts (on watch events, not a timer) until
    /// every cluster is Ready (or Failed, Orphaned, Suspended, deleted), for at most this long
    /// (e.g. 10m). Exits 1 when they do not all get there.
    #[arg(long, value_name = "DURATION", value_parser = parse_interval)]
    pub wait: Option<std::time::Duration>,
    /// The repository (a working copy).
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// Only this cluster.
    #[arg(long)]
    pub cluster: Option<String>,
    /// Correct drift (default) or only report it.
    #[arg(long, value_enum, default_value_t)]
    pub drift: DriftArg,
    /// Revision label recorded in status (default: the repository's HEAD commit, else "local").
    #[arg(long)]
    pub revision: Option<String>,
    /// The management cluster this is (default: the repository's only one).
    #[arg(long)]
    pub management: Option<String>,
    /// Workload clusters reconciled at the same time.
    #[arg(long, default_value_t = 4, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    pub concurrency: usize,
    /// Upgrades.
    #[command(flatten)]
    pub upgrade: UpgradeArgs,
    /// Connection.
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// `capstan diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The repository (a working copy or a bare repository).
    #[arg(default_value = ".")]
    pub repo: PathBuf,
    /// The base branch (e.g. origin/main): the change is compared with the commit it branched
    /// from, the merge base of this and --head, as a pull request's diff is.
    #[arg(long)]
    pub base: String,
    /// The revision with the change (default: the working copy as it is, uncommitted edits
    /// included).
    #[arg(long)]
    pub head: Option<String>,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t)]
    pub output: ReportOutput,
    /// Only this cluster.
    #[arg(long)]
    pub cluster: Option<String>,
    /// Commit signatures: with --verify-commits, --head (required then) is verified; with
    /// `all`, every commit from --base to --head.
    #[command(flatten)]
    pub verify: VerifyArgs,
}

/// `capstan kubeconfig`.
#[derive(Debug, Args)]
pub struct KubeconfigArgs {
    /// The workload cluster: its Cluster API Cluster's name.
    pub cluster: String,
    /// The Cluster's namespace (default: found by looking for a Cluster API Cluster of that name
    /// in every namespace).
    #[arg(long, short)]
    pub namespace: Option<String>,
    /// Add it to your kubeconfig (--kubeconfig, else the first file of $KUBECONFIG, else
    /// ~/.kube/config) as a context with a cluster and a user of its own, replacing those of the
    /// same names, instead of printing it.
    #[arg(long)]
    pub merge: bool,
    /// With --merge: the context's name (default: the cluster's); its cluster entry has the same
    /// name, its user entry the name and `-admin`.
    #[arg(long, value_name = "NAME", requires = "merge")]
    pub context_name: Option<String>,
    /// With --merge: also make it the current context.
    #[arg(long = "use", requires = "merge")]
    pub use_context: bool,
    /// The kubeconfig EKS Anywhere gives the users of a cluster with an AWSIamConfig instead of
    /// the admin's: the same server and CA, and a user that runs `aws-iam-authenticator token -i
    /// <cluster ID>` (no credential in it; hand it to the people the AWSIamConfig maps). With
    /// --merge its user entry is the name and `-aws`.
    #[arg(long)]
    pub aws_iam: bool,
    /// Connection (to the management cluster; with --merge, --kubeconfig is also the file
    /// written).
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// `capstan rehearse`.
#[cfg(feature = "dev")]
#[derive(Debug, Args)]
pub struct RehearseArgs {
    /// The repository (a working copy or a bare repository).
    #[arg(default_value = ".")]
    pub repo: PathBuf,
    /// The base branch (e.g. origin/main): the clusters are brought up first at the commit the
    /// change branched from (the merge base of this and --head, as `capstan diff` takes it).
    #[arg(long)]
    pub base: String,
    /// The revision with the change (default: the working copy as it is).
    #[arg(long)]
    pub head: Option<String>,
    /// Only this cluster.
    #[arg(long)]
    pub cluster: Option<String>,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t)]
    pub output: ReportOutput,
    /// Clusters rehearsed at once (each runs its own passes and watches; two fit a 2-core CI
    /// runner).
    #[arg(long, default_value_t = 2, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=16))]
    pub concurrency: usize,
    /// How long each revision of a cluster may take to come up or roll out.
    #[arg(long, default_value = "10m", value_parser = parse_interval)]
    pub timeout: std::time::Duration,
    /// The kubeconfig of a running control plane with the Cluster API controllers and CAPD's
    /// in-memory backend (default: the one `capstan dev up` keeps, started when not running
    /// and stopped afterwards). Never $KUBECONFIG: a rehearsal creates clusters.
    #[arg(long)]
    pub control_plane: Option<PathBuf>,
    /// Where `capstan dev up` keeps its control plane (default: ~/.cache/capstan/dev).
    #[arg(long)]
    pub dev_dir: Option<PathBuf>,
    /// Leave the rehearsed clusters (and a control plane the rehearsal started) running.
    #[arg(long)]
    pub keep: bool,
    /// Also write the JSON report here (a CI job posts the markdown and sets a commit status
    /// per cluster from the JSON, from one rehearsal).
    #[arg(long)]
    pub json_file: Option<PathBuf>,
}

/// `capstan new ...`.
#[derive(Debug, Subcommand)]
pub enum NewCommand {
    /// Write a new workload cluster directory (validated with the fleet before anything is written).
    Cluster(NewClusterArgs),
}

/// Values shared by `init` and `new cluster`.
#[derive(Debug, Args)]
pub struct ClusterValues {
    /// Provider.
    #[arg(long, value_parser = provider_parser())]
    pub provider: String,
    /// Kubernetes minor, e.g. 1.33 (default: the newest of the release).
    #[arg(long)]
    pub kubernetes_version: Option<String>,
    /// EKS Anywhere version (default: latest for management clusters, inherited for workloads).
    #[arg(long)]
    pub eksa_version: Option<String>,
    /// Namespace of the cluster's objects (default eksa-system).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Control-plane machines.
    #[arg(long)]
    pub control_plane_count: Option<u32>,
    /// Machines of worker group md-0.
    #[arg(long)]
    pub worker_count: Option<u32>,
    /// Pod CIDR (required).
    #[arg(long)]
    pub pod_cidr: Option<String>,
    /// Service CIDR (required).
    #[arg(long)]
    pub service_cidr: Option<String>,
    /// Control-plane endpoint address (required on vSphere).
    #[arg(long)]
    pub endpoint_host: Option<String>,
    /// Run etcd on N separate machines (etcdadm).
    #[arg(long, value_name = "N")]
    pub external_etcd: Option<u32>,
    /// Docker clusters: what CAPD runs machines on, `docker` (containers) or `in-memory`
    /// (simulated by CAPD, for tests and local tries); default: the management cluster's.
    #[arg(long, value_name = "BACKEND")]
    pub docker_backend: Option<String>,
    /// A YAML file of further values (workerGroups, vsphere placement, ...).
    #[arg(long, value_name = "FILE")]
    pub values: Option<PathBuf>,
}

/// `capstan init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// The new repository's directory.
    pub dir: PathBuf,
    /// Name of the management cluster.
    #[arg(long)]
    pub management: String,
    /// Also run `git init` and make a first commit.
    #[arg(long)]
    pub git: bool,
    /// The platform admins, GitHub users `@user` or teams `@org/team`, comma-separated: in
    /// `.github/CODEOWNERS` they own everything but the workload directories given to a team
    /// (`new cluster --owners`). Not required, so that a trial fleet that never reaches GitHub
    /// needs no team; without it the file names the placeholder `@OWNER/platform-admins`, and
    /// both the file and `init` say that it protects nothing until replaced.
    #[arg(long, value_name = "OWNER[,OWNER...]", value_delimiter = ',', value_parser = Owner::parse)]
    pub admins: Vec<Owner>,
    /// Cluster values.
    #[command(flatten)]
    pub values: ClusterValues,
}

/// `capstan new cluster`.
#[derive(Debug, Args)]
pub struct NewClusterArgs {
    /// Name of the new cluster.
    pub name: String,
    /// The management cluster that will manage it.
    #[arg(long)]
    pub management: String,
    /// The repository.
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// The team that owns the new cluster's directory (and nothing else) in `.github/CODEOWNERS`:
    /// `@user` or `@org/team`, comma-separated. Without it the platform admins own it.
    #[arg(long, value_name = "OWNER[,OWNER...]", value_delimiter = ',', value_parser = Owner::parse)]
    pub owners: Vec<Owner>,
    /// Cluster values.
    #[command(flatten)]
    pub values: ClusterValues,
    /// Open a pull request instead of writing into the working copy.
    #[command(flatten)]
    pub pr: PrArgs,
}

/// `--open-pr`: the change goes to a branch pushed to the remote and a pull request, and the
/// working copy is left as it is.
#[derive(Debug, Args, Clone, Default)]
pub struct PrArgs {
    /// Commit the change on a branch off the remote's base branch, push it and open (or update)
    /// a pull request whose body is the `capstan diff` of the change.
    #[arg(long)]
    pub open_pr: bool,
    /// The Git remote to push to (its URL: https://, ssh:// or a path).
    #[arg(long, default_value = "origin", requires = "open_pr")]
    pub remote: String,
    /// The branch the pull request goes into.
    #[arg(long, default_value = "main", requires = "open_pr")]
    pub base: String,
    /// The branch to push (default: capstan/<what>-<cluster>); re-running updates it.
    #[arg(long, requires = "open_pr")]
    pub branch: Option<String>,
    /// Deploy key for ssh:// remotes (must be allowed to push).
    #[arg(long, requires = "open_pr")]
    pub ssh_key: Option<PathBuf>,
    /// known_hosts for ssh:// remotes.
    #[arg(long, requires = "open_pr")]
    pub known_hosts: Option<PathBuf>,
    /// PEM file of CA certificates trusted for https:// remotes.
    #[arg(long, requires = "open_pr")]
    pub ca_file: Option<PathBuf>,
    /// GitHub credentials and repository.
    #[command(flatten)]
    pub github: GitHubArgs,
}
