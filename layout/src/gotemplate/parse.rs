//! The parser: Go's `text/template/parse` parser over [`super::lex`]'s tokens, rule for rule, so
//! that a template parses here exactly when it parses for the add-on controller, and every
//! function it names is found. It builds no tree: it checks what Go checks while parsing
//! (pipelines and their declarations, the variables in scope, control structures and their
//! `else`/`end`, `break`/`continue` inside `range`, `define`/`template`/`block` names, that each
//! template is defined once, literals, that functions are defined) and records each function
//! named (an identifier in an operand: a call, wherever it stands).
//!
//! Go reads tokens through a small look-ahead buffer shared by the trees of one parse (the
//! template and each `define` or `block` in it); here the tokens sit in a vector with a cursor,
//! and each tree remembers the last token it read from the lexer, which is the line Go's
//! messages give. One deliberate difference: Go nests parentheses up to 10,000 deep and control
//! structures without limit; capstan refuses more than [`MAX_DEPTH`] levels of either, so its
//! recursion stays within a thread's stack (no values template comes near it).

use std::collections::HashMap;

use super::lex::{Item, Kind};
use super::literal;
use super::{Call, SyntaxError};

/// How deep parentheses and control structures may nest (together).
pub const MAX_DEPTH: usize = 100;

/// What an operand is, as far as the rules that follow it care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arg {
    Bool,
    Dot,
    Nil,
    Number,
    String,
    Field,
    Variable,
    Identifier,
    Chain,
    Pipe,
}

/// What an item of a list is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    /// Text; whether it is only spaces (an empty tree's).
    Text(bool),
    /// An action, `if`, `range`, `with`, `template` or `block`: what makes a tree non-empty.
    Action,
    Break,
    Continue,
    End,
    Else,
}

impl Node {
    fn describe(self) -> &'static str {
        match self {
            Node::End => "{{end}}",
            Node::Else => "{{else}}",
            _ => "node",
        }
    }
}

type Result<T> = std::result::Result<T, SyntaxError>;

pub(crate) struct Parser<'a, 't> {
    items: &'t [Item<'a>],
    cursor: usize,
    /// Tokens read from the lexer so far (all trees).
    lexed: usize,
    /// The last token the current tree read from the lexer (Go's `token[0]`).
    last: Option<usize>,
    is_defined: &'t dyn Fn(&str) -> bool,
    /// The current tree's name (bytes: a name's escapes need not make UTF-8).
    name: Vec<u8>,
    vars: Vec<String>,
    range_depth: usize,
    depth: usize,
    action_line: usize,
    /// Templates defined so far: name → whether its tree is empty.
    trees: HashMap<Vec<u8>, bool>,
    pub(crate) calls: Vec<Call>,
}

impl<'a, 't> Parser<'a, 't> {
    pub(crate) fn new(items: &'t [Item<'a>], is_defined: &'t dyn Fn(&str) -> bool) -> Self {
        Parser {
            items,
            cursor: 0,
            lexed: 0,
            last: None,
            is_defined,
            name: Vec::new(),
            vars: vec!["$".into()],
            range_depth: 0,
            depth: 0,
            action_line: 0,
            trees: HashMap::new(),
            calls: Vec::new(),
        }
    }

    // ── tokens ──

    fn item(&self, i: usize) -> &'t Item<'a> {
        // The last token is Eof or Error, and nothing reads past either.
        &self.items[i.min(self.items.len() - 1)]
    }

    fn next(&mut self) -> &'t Item<'a> {
        let i = self.cursor.min(self.items.len() - 1);
        if i >= self.lexed {
            self.lexed = i + 1;
            self.last = Some(i);
        }
        self.cursor = i + 1;
        self.item(i)
    }

    fn backup(&mut self) {
        self.cursor -= 1;
    }

    fn peek(&mut self) -> &'t Item<'a> {
        let item = self.next();
        self.backup();
        item
    }

    fn next_non_space(&mut self) -> &'t Item<'a> {
        loop {
            let item = self.next();
            if item.kind != Kind::Space {
                return item;
            }
        }
    }

    fn peek_non_space(&mut self) -> &'t Item<'a> {
        let item = self.next_non_space();
        self.backup();
        item
    }

    // ── errors ──

    fn errorf(&self, message: String) -> SyntaxError {
        let (line, pos) = self
            .last
            .map(|i| (self.item(i).line, self.item(i).pos))
            .unwrap_or((0, 0));
        SyntaxError { line, pos, message }
    }

    fn unexpected(&self, item: &Item, context: &str) -> SyntaxError {
        if item.kind == Kind::Error {
            let mut extra = String::new();
            if self.action_line != 0 && self.action_line != item.line {
                extra = format!(" in action started at line {}", self.action_line);
                if item.val.ends_with(" action") {
                    extra = extra[" in action".len()..].to_string();
                }
            }
            return self.errorf(format!("{}{extra}", item.val));
        }
        self.errorf(format!("unexpected {} in {context}", describe(item)))
    }

    fn expect(&mut self, kind: Kind, context: &str) -> Result<&'t Item<'a>> {
        let item = self.next_non_space();
        if item.kind != kind {
            return Err(self.unexpected(item, context));
        }
        Ok(item)
    }

    fn deeper(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.errorf(format!(
                "nested more than {MAX_DEPTH} levels deep (parentheses and control structures)"
            )));
        }
        Ok(())
    }

    // ── trees ──

    /// Parses a whole template named `name`.
    pub(crate) fn parse(&mut self, name: &str) -> Result<()> {
        self.name = name.as_bytes().to_vec();
        let mut empty = true;
        while self.peek().kind != Kind::Eof {
            if self.peek().kind == Kind::LeftDelim {
                let delim = self.cursor;
                self.next();
                if self.next_non_space().kind == Kind::Define {
                    self.subtree(|p| p.parse_definition())?;
                    continue;
                }
                self.cursor = delim;
            }
            match self.text_or_action()? {
                n @ (Node::End | Node::Else) => {
                    return Err(self.errorf(format!("unexpected {}", n.describe())));
                }
                n => empty &= matches!(n, Node::Text(true)),
            }
        }
        self.add(empty)
    }

    /// Runs `f` as a tree of its own (a `define` or a `block`): its own variables, range depth
    /// and last token.
    fn subtree(&mut self, f: impl FnOnce(&mut Self) -> Result<()>) -> Result<()> {
        let saved = (
            std::mem::replace(&mut self.vars, vec!["$".into()]),
            std::mem::take(&mut self.range_depth),
            self.last.take(),
            self.name.clone(),
        );
        f(self)?;
        (self.vars, self.range_depth, self.last, self.name) = saved;
        Ok(())
    }

    /// Records the current tree as defined: once, but for empty trees.
    fn add(&mut self, empty: bool) -> Result<()> {
        match self.trees.get(&self.name) {
            Some(false) if !empty => Err(self.errorf(format!(
                "template: multiple definition of template {:?}",
                String::from_utf8_lossy(&self.name)
            ))),
            Some(false) => Ok(()),
            _ => {
                self.trees.insert(self.name.clone(), empty);
                Ok(())
            }
        }
    }

    fn parse_definition(&mut self) -> Result<()> {
        const CONTEXT: &str = "define clause";
        let name = self.next_non_space();
        if !matches!(name.kind, Kind::String | Kind::RawString) {
            return Err(self.unexpected(name, CONTEXT));
        }
        self.name = self.unquote(name)?;
        self.expect(Kind::RightDelim, CONTEXT)?;
        let (empty, end) = self.item_list()?;
        if end != Node::End {
            return Err(self.errorf(format!("unexpected {} in {CONTEXT}", end.describe())));
        }
        self.add(empty)
    }

    /// Items up to `{{end}}` or `{{else}}` (returned): whether they are all blank text.
    fn item_list(&mut self) -> Result<(bool, Node)> {
        let mut empty = true;
        while self.peek_non_space().kind != Kind::Eof {
            let n = self.text_or_action()?;
            if matches!(n, Node::End | Node::Else) {
                return Ok((empty, n));
            }
            empty &= matches!(n, Node::Text(true));
        }
        Err(self.errorf("unexpected EOF".into()))
    }

    fn text_or_action(&mut self) -> Result<Node> {
        let item = self.next_non_space();
        match item.kind {
            Kind::Text => Ok(Node::Text(item.val.trim().is_empty())),
            Kind::LeftDelim => {
                self.action_line = item.line;
                let n = self.action();
                self.action_line = 0;
                n
            }
            _ => Err(self.unexpected(item, "input")),
        }
    }

    fn action(&mut self) -> Result<Node> {
        let item = self.next_non_space();
        match item.kind {
            Kind::Block => return self.block_control(),
            Kind::Break => return self.loop_control("{{break}}", Node::Break),
            Kind::Continue => return self.loop_control("{{continue}}", Node::Continue),
            Kind::Else => return self.else_control(),
            Kind::End => {
                self.expect(Kind::RightDelim, "end")?;
                return Ok(Node::End);
            }
            Kind::If => return self.control("if"),
            Kind::Range => return self.control("range"),
            Kind::Template => return self.template_control(),
            Kind::With => return self.control("with"),
            _ => {}
        }
        self.backup();
        self.pipeline("command", Kind::RightDelim)?;
        Ok(Node::Action)
    }

    fn loop_control(&mut self, what: &str, node: Node) -> Result<Node> {
        let item = self.next_non_space();
        if item.kind != Kind::RightDelim {
            return Err(self.unexpected(item, what));
        }
        if self.range_depth == 0 {
            return Err(self.errorf(format!("{what} outside {{{{range}}}}")));
        }
        Ok(node)
    }

    // ── pipelines ──

    fn pipeline(&mut self, context: &str, end: Kind) -> Result<()> {
        let mut decls = 0;
        loop {
            let v = self.peek_non_space();
            if v.kind != Kind::Variable {
                break;
            }
            let at = self.cursor;
            self.next();
            self.peek();
            let next = self.peek_non_space();
            match next.kind {
                Kind::Assign | Kind::Declare => {
                    self.next_non_space();
                    self.vars.push(v.val.to_string());
                }
                Kind::Char if next.val == "," => {
                    self.next_non_space();
                    decls += 1;
                    self.vars.push(v.val.to_string());
                    if context == "range" && decls < 2 {
                        match self.peek_non_space().kind {
                            Kind::Variable | Kind::RightDelim | Kind::RightParen => continue,
                            _ => {
                                return Err(
                                    self.errorf("range can only initialize variables".into())
                                );
                            }
                        }
                    }
                    return Err(self.errorf(format!("too many declarations in {context}")));
                }
                _ => {
                    // An operand, not a declaration: read again from the variable (with the
                    // space after it, if any).
                    self.cursor = at;
                }
            }
            break;
        }
        let mut commands: Vec<Arg> = Vec::new();
        loop {
            let item = self.next_non_space();
            match item.kind {
                k if k == end => break,
                Kind::Bool
                | Kind::CharConstant
                | Kind::Complex
                | Kind::Dot
                | Kind::Field
                | Kind::Identifier
                | Kind::Number
                | Kind::Nil
                | Kind::RawString
                | Kind::String
                | Kind::Variable
                | Kind::LeftParen => {
                    self.backup();
                    commands.push(self.command()?);
                }
                _ => return Err(self.unexpected(item, context)),
            }
        }
        if commands.is_empty() {
            return Err(self.errorf(format!("missing value for {context}")));
        }
        for (i, first) in commands.iter().enumerate().skip(1) {
            if matches!(
                first,
                Arg::Bool | Arg::Dot | Arg::Nil | Arg::Number | Arg::String
            ) {
                return Err(self.errorf(format!(
                    "non executable command in pipeline stage {}",
                    i + 1
                )));
            }
        }
        Ok(())
    }

    /// `if`, `range` or `with`: its pipeline, its list, and an `else` list; the variables the
    /// pipeline declares live until its `end`.
    fn control(&mut self, context: &str) -> Result<Node> {
        self.deeper()?;
        let vars = self.vars.len();
        self.pipeline(context, Kind::RightDelim)?;
        if context == "range" {
            self.range_depth += 1;
        }
        let (_, next) = self.item_list()?;
        if context == "range" {
            self.range_depth -= 1;
        }
        if next == Node::Else {
            let chained = match self.peek().kind {
                Kind::If if context == "if" => Some("if"),
                Kind::With if context == "with" => Some("with"),
                _ => None,
            };
            if let Some(chained) = chained {
                // `{{else if x}}` is `{{else}}{{if x}}…{{end}}{{end}}`.
                self.next();
                self.control(chained)?;
            } else {
                let (_, next) = self.item_list()?;
                if next != Node::End {
                    return Err(self.errorf(format!("expected end; found {}", next.describe())));
                }
            }
        }
        self.vars.truncate(vars);
        self.depth -= 1;
        Ok(Node::Action)
    }

    fn else_control(&mut self) -> Result<Node> {
        let peek = self.peek_non_space();
        if matches!(peek.kind, Kind::If | Kind::With) {
            return Ok(Node::Else);
        }
        self.expect(Kind::RightDelim, "else")?;
        Ok(Node::Else)
    }

    fn template_name(&mut self, context: &str) -> Result<Vec<u8>> {
        let item = self.next_non_space();
        match item.kind {
            Kind::String | Kind::RawString => self.unquote(item),
            _ => Err(self.unexpected(item, context)),
        }
    }

    fn block_control(&mut self) -> Result<Node> {
        const CONTEXT: &str = "block clause";
        self.deeper()?;
        let name = self.template_name(CONTEXT)?;
        self.pipeline(CONTEXT, Kind::RightDelim)?;
        let mut end = Node::End;
        self.subtree(|p| {
            p.name = name;
            let (empty, e) = p.item_list()?;
            end = e;
            if e != Node::End {
                return Ok(());
            }
            p.add(empty)
        })?;
        if end != Node::End {
            return Err(self.errorf(format!("unexpected {} in {CONTEXT}", end.describe())));
        }
        self.depth -= 1;
        Ok(Node::Action)
    }

    fn template_control(&mut self) -> Result<Node> {
        const CONTEXT: &str = "template clause";
        self.template_name(CONTEXT)?;
        if self.next_non_space().kind != Kind::RightDelim {
            self.backup();
            self.pipeline(CONTEXT, Kind::RightDelim)?;
        }
        Ok(Node::Action)
    }

    /// Operands up to `|`, `}}` or `)`; the kind of the first.
    fn command(&mut self) -> Result<Arg> {
        let mut first = None;
        loop {
            self.peek_non_space();
            if let Some(arg) = self.operand()? {
                first.get_or_insert(arg);
            }
            let item = self.next();
            match item.kind {
                Kind::Space => continue,
                Kind::RightDelim | Kind::RightParen => self.backup(),
                Kind::Pipe => {}
                _ => return Err(self.unexpected(item, "operand")),
            }
            break;
        }
        first.ok_or_else(|| self.errorf("empty command".into()))
    }

    /// A term and the fields read from it.
    fn operand(&mut self) -> Result<Option<Arg>> {
        let Some((arg, text)) = self.term()? else {
            return Ok(None);
        };
        if self.peek().kind != Kind::Field {
            return Ok(Some(arg));
        }
        while self.peek().kind == Kind::Field {
            self.next();
        }
        match arg {
            Arg::Field | Arg::Variable => Ok(Some(arg)),
            Arg::Bool | Arg::String | Arg::Number | Arg::Nil | Arg::Dot => {
                Err(self.errorf(format!("unexpected . after term {text:?}")))
            }
            _ => Ok(Some(Arg::Chain)),
        }
    }

    /// A literal, a function, `.`, a field, a variable or a parenthesized pipeline; None (and
    /// nothing read) when the next token is none of those.
    fn term(&mut self) -> Result<Option<(Arg, &'t str)>> {
        let item = self.next_non_space();
        let arg = match item.kind {
            Kind::Identifier => {
                if !(self.is_defined)(&item.val) {
                    return Err(self.errorf(format!("function {:?} not defined", item.val)));
                }
                self.calls.push(Call {
                    name: item.val.to_string(),
                    pos: item.pos,
                    line: item.line,
                });
                Arg::Identifier
            }
            Kind::Dot => Arg::Dot,
            Kind::Nil => Arg::Nil,
            Kind::Variable => {
                let name = item.val.split('.').next().unwrap_or_default();
                if !self.vars.iter().any(|v| v == name) {
                    return Err(self.errorf(format!("undefined variable {name:?}")));
                }
                Arg::Variable
            }
            Kind::Field => Arg::Field,
            Kind::Bool => Arg::Bool,
            Kind::CharConstant => {
                if !literal::char_ok(&item.val) {
                    return Err(self.errorf(format!("malformed character constant: {}", item.val)));
                }
                Arg::Number
            }
            Kind::Complex | Kind::Number => {
                if let Some(e) = literal::number_error(&item.val, item.kind == Kind::Complex) {
                    return Err(self.errorf(e));
                }
                Arg::Number
            }
            Kind::LeftParen => {
                self.deeper()?;
                self.pipeline("parenthesized pipeline", Kind::RightParen)?;
                self.depth -= 1;
                Arg::Pipe
            }
            Kind::String | Kind::RawString => {
                self.unquote(item)?;
                Arg::String
            }
            _ => {
                self.backup();
                return Ok(None);
            }
        };
        Ok(Some((arg, item.val.as_ref())))
    }

    fn unquote(&self, item: &Item) -> Result<Vec<u8>> {
        literal::unquote(&item.val).ok_or_else(|| self.errorf("invalid syntax".into()))
    }
}

/// Go's description of an unexpected token (`<if>`, `"text"`, `EOF`).
fn describe(item: &Item) -> String {
    match item.kind {
        Kind::Eof => "EOF".into(),
        Kind::Error => item.val.to_string(),
        Kind::Block
        | Kind::Break
        | Kind::Continue
        | Kind::Dot
        | Kind::Define
        | Kind::Else
        | Kind::End
        | Kind::If
        | Kind::Nil
        | Kind::Range
        | Kind::Template
        | Kind::With => format!("<{}>", item.val),
        _ if item.val.chars().count() > 10 => {
            format!("{:?}...", item.val.chars().take(10).collect::<String>())
        }
        _ => format!("{:?}", item.val),
    }
}
