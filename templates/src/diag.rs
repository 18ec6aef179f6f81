//! Diagnostics: what `capstan validate` reports.
//!
//! Every problem found in a fleet repo becomes a [`Diagnostic`] with a stable [`Code`] (scripts and
//! CI annotations key on it, so codes are never renamed), a message for humans, and where it is:
//! the file, line and column, and the cluster it belongs to. Validation collects all of them
//! rather than stopping at the first, so one run shows everything that needs fixing.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::yaml::Pos;

macro_rules! codes {
    ($($(#[$doc:meta])* $variant:ident = $text:literal,)*) => {
        /// The stable identifier of a kind of problem.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Code { $($(#[$doc])* $variant,)* }

        impl Code {
            /// The code as written in reports, e.g. `unknown-field`.
            pub fn as_str(self) -> &'static str {
                match self { $(Code::$variant => $text,)* }
            }

            /// Every code, in the order they are documented.
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];
        }
    };
}

codes! {
    /// A file could not be read.
    Io = "io-error",
    /// A file is not valid UTF-8.
    NotUtf8 = "not-utf8",
    /// A file is larger than the limit.
    FileTooLarge = "file-too-large",
    /// A symlink points outside the repository (or is dangling).
    SymlinkEscapes = "symlink-escapes",
    /// A symlink points into `.git`.
    SymlinkIntoGit = "symlink-into-git",
    /// A binary file (a NUL byte) where a YAML spec belongs.
    BinaryFile = "binary-file",
    /// A file or directory name that is not valid UTF-8.
    InvalidPath = "invalid-path",
    /// Two names in one directory that differ only in case.
    CaseCollision = "case-collision",
    /// A directory with more entries than the limit (not read).
    TooManyEntries = "too-many-entries",
    /// Directories nested deeper than the limit (not read).
    TooDeep = "too-deep",
    /// A tree that is not a fleet repository: no `clusters/`, or no cluster in it. Nothing of
    /// such a revision is applied, nor anything pruned or marked for it.
    NotAFleet = "not-a-fleet",
    /// YAML that does not parse.
    YamlSyntax = "yaml-syntax",
    /// A file or directory where the layout does not allow one.
    UnexpectedEntry = "unexpected-entry",
    /// A cluster directory without a Cluster object.
    MissingCluster = "missing-cluster",
    /// More than one Cluster object in one cluster directory.
    MultipleClusters = "multiple-clusters",
    /// A directory name that differs from its Cluster's metadata.name.
    DirNameMismatch = "dir-name-mismatch",
    /// A workload cluster whose managementCluster is not the directory it sits under.
    ManagementMismatch = "management-mismatch",
    /// A management cluster directory whose Cluster is not self-managed.
    NotSelfManaged = "not-self-managed",
    /// A name that is not a DNS-1123 label of at most 35 characters.
    InvalidName = "invalid-name",
    /// The same cluster or object name used twice.
    DuplicateName = "duplicate-name",
    /// A document without apiVersion, kind or metadata.name.
    MissingTypeInfo = "missing-type-info",
    /// An EKS Anywhere kind capstan does not handle yet (another provider, say).
    UnsupportedKind = "unsupported-kind",
    /// A field that is not part of the EKS Anywhere schema.
    UnknownField = "unknown-field",
    /// An EKS Anywhere field capstan does not support yet.
    UnsupportedField = "unsupported-field",
    /// A deprecated field (a warning).
    DeprecatedField = "deprecated-field",
    /// A required field that is missing.
    MissingField = "missing-field",
    /// A value of the wrong type.
    InvalidType = "invalid-type",
    /// A value outside what is allowed.
    InvalidValue = "invalid-value",
    /// A Kubernetes version written as a number (1.30 reads as 1.3).
    UnquotedVersion = "unquoted-version",
    /// A reference to an object that is not in the cluster directory.
    DanglingRef = "dangling-ref",
    /// An EKS Anywhere object that no Cluster refers to (a warning).
    UnusedObject = "unused-object",
    /// An eksaVersion or Kubernetes version the release manifest does not know.
    UnknownVersion = "unknown-version",
    /// Release documents (release manifest, Bundles, EKS-D) that are missing, malformed or do
    /// not match their pinned checksum.
    ReleaseUnavailable = "release-unavailable",
    /// A release document whose sha256 differs from the pin in the fleet config.
    ChecksumMismatch = "checksum-mismatch",
    /// eksaVersion and bundlesRef both set.
    VersionConflict = "version-conflict",
    /// Versions that break a skew rule.
    VersionSkew = "version-skew",
    /// A workload cluster naming an EKS Anywhere release its management cluster neither runs nor
    /// declares in its fleet config (`spec.eksaVersions`): the release object it needs is a
    /// fleet-wide object on the management cluster, which only an admin decides on.
    UndeclaredRelease = "undeclared-release",
    /// A malformed CIDR.
    InvalidCidr = "invalid-cidr",
    /// CIDRs that overlap.
    CidrOverlap = "cidr-overlap",
    /// Fewer Hardware in the management directory's inventory match a bare-metal machine
    /// config's selector than its machines need (an error), or than they need with the spare a
    /// rolling upgrade takes (a warning).
    NotEnoughHardware = "not-enough-hardware",
    /// A workload directory object of a kind workloads may not create.
    ForbiddenKind = "forbidden-kind",
    /// An object outside its cluster's namespace.
    ForeignNamespace = "foreign-namespace",
    /// A Secret with data in the repository.
    SecretWithData = "secret-with-data",
    /// A Secret the cluster's machines read is not kept (encrypted) in its directory or the
    /// management directory (a warning: it may be created on the management cluster by hand).
    MissingSecret = "missing-secret",
    /// A SOPS-encrypted file that is malformed, uses what capstan refuses (PGP or KMS only,
    /// Shamir groups, a MAC over the encrypted values only), is not encrypted for the fleet's
    /// recipients, or encrypts more than Secrets' data.
    SopsInvalid = "sops-invalid",
    /// A workload cluster (or an object of its directory) in a namespace workload clusters may
    /// not use: Kubernetes' own, capstan's, a controller's, the management cluster's.
    ReservedNamespace = "reserved-namespace",
    /// An object of a workload directory not named for its cluster (`<cluster>` or
    /// `<cluster>-…`), or named for another cluster of the fleet.
    NameOutsideCluster = "name-outside-cluster",
    /// A ClusterResourceSet or HelmChartProxy whose selector may select another cluster.
    ForeignSelector = "foreign-selector",
    /// A reference from a workload directory to something that is not its cluster's (another
    /// cluster's label, a Secret elsewhere, an owner, a template function reading the
    /// controller's environment).
    ForeignReference = "foreign-reference",
    /// A workload's Secret of a type, or with an annotation, that makes a controller fill it in
    /// or copy into it (a service-account token, a reflected Secret).
    FillableSecret = "fillable-secret",
    /// A workload's Secret or ConfigMap named as controllers name another cluster's (its CA,
    /// kubeconfig, init lock), or a cluster named so that its generated names are another's.
    ReservedName = "reserved-name",
    /// A HelmChartProxy's values template that Go's text/template refuses (what the add-on
    /// controller would fail on), or that calls a function the controller does not define.
    TemplateSyntax = "template-syntax",
    /// A workload directory's values template calling a function whose result is not a
    /// function of the cluster (the clock, randomness, generated keys): the add-on controller
    /// would upgrade the release at every reconcile.
    TemplateFunction = "template-function",
    /// A tombstone in the directory of a management cluster that still manages workload clusters.
    ManagementTombstone = "management-tombstone",
    /// Rendering failed (a template bug, reported rather than hidden).
    RenderFailed = "render-failed",
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// How bad a problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The cluster is not rendered or applied.
    Error,
    /// Reported, but the cluster still renders.
    Warning,
}

/// One problem, with where it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// Stable identifier.
    pub code: Code,
    /// Error or warning.
    pub severity: Severity,
    /// What is wrong, for humans.
    pub message: String,
    /// The file, relative to the repository root.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    /// Line, from 1 (0 when the problem is the file as a whole).
    pub line: usize,
    /// Column, from 1.
    pub column: usize,
    /// The cluster the problem belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
}

impl Diagnostic {
    /// A new error with no location yet.
    pub fn error(code: Code, message: impl Into<String>) -> Self {
        Diagnostic {
            code,
            severity: Severity::Error,
            message: message.into(),
            file: None,
            line: 0,
            column: 0,
            cluster: None,
        }
    }

    /// A new warning with no location yet.
    pub fn warning(code: Code, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Self::error(code, message)
        }
    }

    /// Sets the file.
    pub fn in_file(mut self, file: impl AsRef<Path>) -> Self {
        self.file = Some(file.as_ref().to_path_buf());
        self
    }

    /// Sets the line and column.
    pub fn at(mut self, pos: Pos) -> Self {
        self.line = pos.line;
        self.column = pos.column;
        self
    }

    /// Sets the cluster, unless one is set already.
    pub fn for_cluster(mut self, cluster: &str) -> Self {
        self.cluster.get_or_insert_with(|| cluster.to_string());
        self
    }

    /// Whether this is an error (not a warning).
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    /// `file:line:col: error[code]: message (cluster NAME)`, the shape editors and CI annotations parse.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}", file.display())?;
            if self.line > 0 {
                write!(f, ":{}:{}", self.line, self.column)?;
            }
            f.write_str(": ")?;
        }
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{sev}[{}]: {}", self.code, self.message)?;
        if let Some(c) = &self.cluster {
            write!(f, " (cluster {c})")?;
        }
        Ok(())
    }
}

/// Whether any of the diagnostics is an error.
pub fn has_errors(diags: &[Diagnostic]) -> bool {
    diags.iter().any(Diagnostic::is_error)
}
