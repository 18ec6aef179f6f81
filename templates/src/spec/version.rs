//! An EKS Anywhere version as a spec names it (`eksaVersion`): compared and stepped through by
//! validation and by the release data alike.

use std::fmt;

/// An EKS Anywhere version, `vMAJOR.MINOR.PATCH[-pre][+build]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SemVer {
    /// Major.
    pub major: u64,
    /// Minor.
    pub minor: u64,
    /// Patch.
    pub patch: u64,
    /// Pre-release and build suffix, as written.
    pub suffix: String,
}

impl SemVer {
    /// Parses `v0.26.1` (the leading `v` is required, as in EKS-A).
    pub fn parse(s: &str) -> Option<SemVer> {
        let rest = s.strip_prefix('v')?;
        let end = rest.find(['-', '+']).unwrap_or(rest.len());
        let (core, suffix) = rest.split_at(end);
        let mut it = core.split('.');
        let mut num = || -> Option<u64> {
            let p = it.next()?;
            if p.is_empty() || !p.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            p.parse().ok()
        };
        let (major, minor, patch) = (num()?, num()?, num()?);
        if it.next().is_some() {
            return None;
        }
        Some(SemVer {
            major,
            minor,
            patch,
            suffix: suffix.to_string(),
        })
    }
}

impl fmt::Display for SemVer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "v{}.{}.{}{}",
            self.major, self.minor, self.patch, self.suffix
        )
    }
}
