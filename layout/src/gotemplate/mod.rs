//! Go templates as the Cluster API add-on provider for Helm (CAAPH) reads them: a
//! HelmChartProxy's `valuesTemplate` is parsed by Go's `text/template` with Sprig's function map,
//! then run in the add-on controller, on the management cluster.
//!
//! Why a parser of its own: a tenant's values template must call no function that reads the
//! controller's environment or network, and whether it does depends on where its actions begin
//! and end, which only Go's lexer decides (a `}}` in a string literal ends nothing; a raw string
//! spans lines; a comment hides what a string would not). So the lexer ([`lex`]) and the parser
//! ([`parse`]) follow Go's `text/template/parse` rule for rule, and a differential test
//! (`tests/e2e/tests/corpus/go_template.rs`) runs Go's own parser (`tests/gotemplate-oracle`) over
//! a corpus of tricky and generated templates and compares, template by template, whether it
//! parses, the line of the error, and every function named with its position.
//!
//! [`check`] applies the rule on top: a template Go would refuse is refused (CAAPH would fail on
//! it), and every function it names must be allowed ([`funcs`]: an allow-list of Go's builtins
//! and Sprig's pure functions).

pub mod funcs;
mod lex;
mod literal;
mod parse;

pub use funcs::Class;
pub use parse::MAX_DEPTH;

/// A function a template names (in an operand: a call, whatever its place).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// Its name.
    pub name: String,
    /// Byte offset in the template.
    pub pos: usize,
    /// Line in the template, from 1.
    pub line: usize,
}

/// Why Go refuses a template.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct SyntaxError {
    /// The line Go's message gives (that of the last token read), from 1.
    pub line: usize,
    /// Byte offset of that token.
    pub pos: usize,
    /// Go's message, without its `template: NAME:LINE:` prefix.
    pub message: String,
}

/// Parses `template` as `text/template` does with `is_defined` functions (besides Go's
/// builtins, which `is_defined` must include), the top-level template named `name`: the
/// functions it names, in order.
pub fn parse_with(
    name: &str,
    template: &str,
    is_defined: &dyn Fn(&str) -> bool,
) -> Result<Vec<Call>, SyntaxError> {
    let items = lex::lex(template);
    let mut p = parse::Parser::new(&items, is_defined);
    p.parse(name)?;
    Ok(p.calls)
}

/// [`parse_with`] with the functions CAAPH defines (Go's builtins and Sprig's).
pub fn parse(name: &str, template: &str) -> Result<Vec<Call>, SyntaxError> {
    parse_with(name, template, &|f| funcs::class_of(f).is_some())
}

/// What [`check`] refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// Go refuses the template.
    Syntax(SyntaxError),
    /// A function outside the allow-list.
    Refused {
        /// The call.
        call: Call,
        /// What its result depends on.
        class: Class,
    },
}

/// Checks a values template a workload directory carries (`name`: the top-level template's
/// name, CAAPH's `<chartName>-<cluster>`): a syntax error, or every call of a function that is
/// not [`Class::Pure`].
pub fn check(name: &str, template: &str) -> Vec<Finding> {
    match parse(name, template) {
        Err(e) => vec![Finding::Syntax(e)],
        Ok(calls) => calls
            .into_iter()
            .filter_map(|call| match funcs::class_of(&call.name) {
                Some(Class::Pure) | None => None,
                Some(class) => Some(Finding::Refused { call, class }),
            })
            .collect(),
    }
}

/// The 1-based column of byte offset `pos` in its line of `text`, in characters.
pub fn column(text: &str, pos: usize) -> usize {
    let pos = pos.min(text.len());
    let start = text[..pos].rfind('\n').map_or(0, |i| i + 1);
    text.get(start..pos).map_or(1, |s| s.chars().count() + 1)
}

#[cfg(test)]
mod tests;
