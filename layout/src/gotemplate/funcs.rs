//! The functions a values template may call: Go's template builtins and Sprig's text function
//! map (`sprig.TxtFuncMap()` of Sprig v3.3.0, what the Cluster API add-on provider for Helm
//! hands its templates), each classed by what its result depends on.
//!
//! The rule is an allow-list: a workload directory's values template may call what is a
//! function of its arguments alone ([`Class::Pure`]). Refused are the functions that read the
//! add-on controller's environment or network ([`Class::Environment`]: a tenant reading the
//! controller's credentials, or probing its network), and those whose result is not a function
//! of the cluster ([`Class::Unstable`]: the clock, randomness, generated keys and salts, which
//! would render other values at every reconcile and so upgrade the release every time). A name
//! in neither list is not defined: Go refuses the template when it parses it, and so does
//! capstan. A Sprig release that adds a function adds nothing to what a tenant may call until
//! it is classed here (the differential test compares this list with Sprig's own).

/// What a function's result depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Its arguments only.
    Pure,
    /// The add-on controller's environment variables or its network (DNS).
    Environment,
    /// The clock, randomness, or keys and salts it generates.
    Unstable,
}

/// text/template's builtins: all pure (the data has no function for `call` to call).
pub const BUILTINS: &[&str] = &[
    "and", "call", "html", "index", "slice", "js", "len", "not", "or", "print", "printf",
    "println", "urlquery", "eq", "ge", "gt", "le", "lt", "ne",
];

/// Sprig's functions that read the controller's environment or network.
pub const ENVIRONMENT: &[&str] = &["env", "expandenv", "getHostByName"];

/// Sprig's functions whose result is not a function of their arguments: the clock (`now`,
/// `ago`; `date` and `htmlDate` fall back to the current time for what is not a time, and
/// `durationRound` measures a time against it), randomness, and generated keys, certificates,
/// salts and IVs.
pub const UNSTABLE: &[&str] = &[
    "now",
    "ago",
    "date",
    "dateInZone",
    "date_in_zone",
    "htmlDate",
    "htmlDateInZone",
    "durationRound",
    "randAlpha",
    "randAlphaNum",
    "randAscii",
    "randNumeric",
    "randBytes",
    "randInt",
    "shuffle",
    "uuidv4",
    "genPrivateKey",
    "genCA",
    "genCAWithKey",
    "genSelfSignedCert",
    "genSelfSignedCertWithKey",
    "genSignedCert",
    "genSignedCertWithKey",
    "encryptAES",
    "bcrypt",
    "htpasswd",
];

/// Sprig's pure functions: strings, lists, dicts, math, encodings, hashes, semver, regexes,
/// paths, URLs, JSON, reflection, dates given as values, and the crypto that derives or reads
/// what it is given.
pub const PURE: &[&str] = &[
    "abbrev",
    "abbrevboth",
    "add",
    "add1",
    "add1f",
    "addf",
    "adler32sum",
    "all",
    "any",
    "append",
    "atoi",
    "b32dec",
    "b32enc",
    "b64dec",
    "b64enc",
    "base",
    "biggest",
    "buildCustomCert",
    "camelcase",
    "cat",
    "ceil",
    "chunk",
    "clean",
    "coalesce",
    "compact",
    "concat",
    "contains",
    "dateModify",
    "date_modify",
    "decryptAES",
    "deepCopy",
    "deepEqual",
    "default",
    "derivePassword",
    "dict",
    "dig",
    "dir",
    "div",
    "divf",
    "duration",
    "empty",
    "ext",
    "fail",
    "first",
    "float64",
    "floor",
    "fromJson",
    "get",
    "has",
    "hasKey",
    "hasPrefix",
    "hasSuffix",
    "hello",
    "indent",
    "initial",
    "initials",
    "int",
    "int64",
    "isAbs",
    "join",
    "kebabcase",
    "keys",
    "kindIs",
    "kindOf",
    "last",
    "list",
    "lower",
    "max",
    "maxf",
    "merge",
    "mergeOverwrite",
    "min",
    "minf",
    "mod",
    "mul",
    "mulf",
    "mustAppend",
    "mustChunk",
    "mustCompact",
    "mustDateModify",
    "mustDeepCopy",
    "mustFirst",
    "mustFromJson",
    "mustHas",
    "mustInitial",
    "mustLast",
    "mustMerge",
    "mustMergeOverwrite",
    "mustPrepend",
    "mustPush",
    "mustRegexFind",
    "mustRegexFindAll",
    "mustRegexMatch",
    "mustRegexReplaceAll",
    "mustRegexReplaceAllLiteral",
    "mustRegexSplit",
    "mustRest",
    "mustReverse",
    "mustSlice",
    "mustToDate",
    "mustToJson",
    "mustToPrettyJson",
    "mustToRawJson",
    "mustUniq",
    "mustWithout",
    "must_date_modify",
    "nindent",
    "nospace",
    "omit",
    "osBase",
    "osClean",
    "osDir",
    "osExt",
    "osIsAbs",
    "pick",
    "pluck",
    "plural",
    "prepend",
    "push",
    "quote",
    "regexFind",
    "regexFindAll",
    "regexMatch",
    "regexQuoteMeta",
    "regexReplaceAll",
    "regexReplaceAllLiteral",
    "regexSplit",
    "repeat",
    "replace",
    "rest",
    "reverse",
    "round",
    "semver",
    "semverCompare",
    "seq",
    "set",
    "sha1sum",
    "sha256sum",
    "sha512sum",
    "slice",
    "snakecase",
    "sortAlpha",
    "split",
    "splitList",
    "splitn",
    "squote",
    "sub",
    "subf",
    "substr",
    "swapcase",
    "ternary",
    "title",
    "toDate",
    "toDecimal",
    "toJson",
    "toPrettyJson",
    "toRawJson",
    "toString",
    "toStrings",
    "trim",
    "trimAll",
    "trimPrefix",
    "trimSuffix",
    "trimall",
    "trunc",
    "tuple",
    "typeIs",
    "typeIsLike",
    "typeOf",
    "uniq",
    "unixEpoch",
    "unset",
    "until",
    "untilStep",
    "untitle",
    "upper",
    "urlJoin",
    "urlParse",
    "values",
    "without",
    "wrap",
    "wrapWith",
];

/// The class of a function the add-on provider defines; None: not defined (Go refuses the
/// template).
pub fn class_of(name: &str) -> Option<Class> {
    if BUILTINS.contains(&name) || PURE.contains(&name) {
        Some(Class::Pure)
    } else if ENVIRONMENT.contains(&name) {
        Some(Class::Environment)
    } else if UNSTABLE.contains(&name) {
        Some(Class::Unstable)
    } else {
        None
    }
}

/// Every Sprig function name of the lists above (`slice` is also a builtin, which Sprig's
/// replaces).
pub fn sprig_names() -> impl Iterator<Item = &'static str> {
    PURE.iter().chain(ENVIRONMENT).chain(UNSTABLE).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_in_one_class() {
        let mut all: Vec<&str> = sprig_names().collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "a name is classed twice");
        // Sprig v3.3.0's text function map has 211 names.
        assert_eq!(n, 211);
        assert_eq!(class_of("env"), Some(Class::Environment));
        assert_eq!(class_of("now"), Some(Class::Unstable));
        assert_eq!(class_of("toYaml"), None, "Helm's, not Sprig's");
        assert_eq!(class_of("include"), None, "Helm's, not Sprig's");
    }
}
