//! The lexer: Go's `text/template/parse` lexer, state for state, over the default delimiters.
//!
//! It must agree with Go's on where every token starts and ends, because that is where a check
//! of the template sees an action end: a lexer that ends an action at a `}}` inside a quoted
//! string (`{{ "}}" }}{{ env "X" }}`) would show a checker other tokens than the add-on
//! controller runs. So each state below is Go's (`lexText`, `lexLeftDelim`, `lexComment`,
//! `lexInsideAction`, `lexSpace`, `lexIdentifier`, `lexFieldOrVariable`, `lexChar`, `lexNumber`,
//! `lexQuote`, `lexRawQuote`, `lexRightDelim`), with its quirks: trim markers need a space
//! (`{{-3}}` is the number -3), a comment must touch its delimiters, `.` followed by a digit
//! starts a number, an identifier must be followed by a terminator, comments are dropped (as
//! without `ParseComments`), and `break`/`continue` are keywords (Sprig defines no function of
//! that name). Unicode letters and digits are Go's (`unicode.IsLetter`, `unicode.IsDigit`: the
//! general categories L and Nd), not Rust's wider `is_alphanumeric`.
//!
//! Tokens are produced up front, up to the end of input or the first error (Go's lexer stops
//! there too: an error token is the last it produces).

use std::sync::OnceLock;

/// What a token is (Go's `itemType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An error; the token's text is the message, and no token follows.
    Error,
    Bool,
    /// Printable ASCII punctuation inside an action (`,` and the like).
    Char,
    CharConstant,
    Complex,
    /// `=`.
    Assign,
    /// `:=`.
    Declare,
    Eof,
    /// `.Name`.
    Field,
    Identifier,
    LeftDelim,
    LeftParen,
    Number,
    Pipe,
    RawString,
    RightDelim,
    RightParen,
    Space,
    String,
    Text,
    /// `$` or `$name`.
    Variable,
    // Keywords.
    Block,
    Break,
    Continue,
    /// `.` alone.
    Dot,
    Define,
    Else,
    End,
    If,
    Nil,
    Range,
    Template,
    With,
}

/// One token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Item<'a> {
    pub(crate) kind: Kind,
    /// Byte offset of its start in the template.
    pub(crate) pos: usize,
    /// Line of its start, from 1.
    pub(crate) line: usize,
    /// Its text; an error's message.
    pub(crate) val: std::borrow::Cow<'a, str>,
}

const LEFT: &str = "{{";
const RIGHT: &str = "}}";
const LEFT_COMMENT: &str = "/*";
const RIGHT_COMMENT: &str = "*/";
/// A trim marker and the space beside it.
const TRIM_LEN: usize = 2;

/// Go's `isSpace`: the ASCII spaces of Go's own syntax.
pub(crate) fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

/// Go's `isAlphaNumeric`: `_`, `unicode.IsLetter` (category L) or `unicode.IsDigit` (Nd).
pub(crate) fn is_alphanumeric(c: char) -> bool {
    if c.is_ascii() {
        return c == '_' || c.is_ascii_alphanumeric();
    }
    static CLASS: OnceLock<Option<regex::Regex>> = OnceLock::new();
    CLASS
        .get_or_init(|| regex::Regex::new(r"^[\p{L}\p{Nd}]$").ok())
        .as_ref()
        .is_some_and(|re| re.is_match(c.encode_utf8(&mut [0; 4])))
}

fn has_left_trim_marker(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 2 && b[0] == b'-' && is_space(b[1] as char)
}

fn has_right_trim_marker(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 2 && is_space(b[0] as char) && b[1] == b'-'
}

fn right_trim_length(s: &str) -> usize {
    s.len() - s.trim_end_matches(is_space).len()
}

fn left_trim_length(s: &str) -> usize {
    s.len() - s.trim_start_matches(is_space).len()
}

/// Go's `%#U` of a rune (`U+0022 '"'`), or of the end of input.
fn describe(c: Option<char>) -> String {
    match c {
        None => "U+FFFFFFFFFFFFFFFF".into(),
        Some(c) if c.is_control() => format!("U+{:04X}", c as u32),
        Some(c) => format!("U+{:04X} '{c}'", c as u32),
    }
}

/// The next state (Go's `stateFn`); `None`: a token was emitted.
#[derive(Clone, Copy)]
enum State {
    Text,
    LeftDelim,
    Comment,
    RightDelim,
    InsideAction,
    Space,
    Identifier,
    Field,
    Variable,
    Char,
    Number,
    Quote,
    RawQuote,
}

struct Lexer<'a> {
    input: &'a str,
    pos: usize,
    start: usize,
    /// Go's `atEOF`: once the end was read, `backup` no longer moves.
    at_eof: bool,
    paren_depth: i64,
    inside_action: bool,
    items: Vec<Item<'a>>,
    /// Newlines before `counted`, to give each token its line.
    counted: usize,
    lines: usize,
    done: bool,
}

/// Every token of `input`, ending with an [`Kind::Eof`] or an [`Kind::Error`] token.
pub(crate) fn lex(input: &str) -> Vec<Item<'_>> {
    let mut l = Lexer {
        input,
        pos: 0,
        start: 0,
        at_eof: false,
        paren_depth: 0,
        inside_action: false,
        items: Vec::new(),
        counted: 0,
        lines: 0,
        done: false,
    };
    while !l.done {
        let mut state = if l.inside_action {
            State::InsideAction
        } else {
            State::Text
        };
        while let Some(next) = l.step(state) {
            state = next;
        }
    }
    l.items
}

impl<'a> Lexer<'a> {
    fn step(&mut self, state: State) -> Option<State> {
        match state {
            State::Text => self.lex_text(),
            State::LeftDelim => self.lex_left_delim(),
            State::Comment => self.lex_comment(),
            State::RightDelim => self.lex_right_delim(),
            State::InsideAction => self.lex_inside_action(),
            State::Space => self.lex_space(),
            State::Identifier => self.lex_identifier(),
            State::Field => self.lex_field_or_variable(Kind::Field),
            State::Variable => self.lex_variable(),
            State::Char => self.lex_quoted('\'', Kind::CharConstant, "character constant"),
            State::Number => self.lex_number(),
            State::Quote => self.lex_quoted('"', Kind::String, "quoted string"),
            State::RawQuote => self.lex_raw_quote(),
        }
    }

    fn rest(&self) -> &'a str {
        &self.input[self.pos.min(self.input.len())..]
    }

    fn next(&mut self) -> Option<char> {
        match self.rest().chars().next() {
            None => {
                self.at_eof = true;
                None
            }
            Some(c) => {
                self.pos += c.len_utf8();
                Some(c)
            }
        }
    }

    fn peek(&mut self) -> Option<char> {
        let c = self.next();
        self.backup();
        c
    }

    fn backup(&mut self) {
        if !self.at_eof
            && let Some(c) = self.input[..self.pos].chars().next_back()
        {
            self.pos -= c.len_utf8();
        }
    }

    fn accept(&mut self, valid: &str) -> bool {
        match self.next() {
            Some(c) if valid.contains(c) => true,
            _ => {
                self.backup();
                false
            }
        }
    }

    fn accept_run(&mut self, valid: &str) {
        while self.next().is_some_and(|c| valid.contains(c)) {}
        self.backup();
    }

    /// The line of byte offset `at` (offsets only grow from one token to the next).
    fn line_of(&mut self, at: usize) -> usize {
        if at >= self.counted {
            self.lines += self.input[self.counted..at]
                .bytes()
                .filter(|b| *b == b'\n')
                .count();
            self.counted = at;
        } else {
            self.lines -= self.input[at..self.counted]
                .bytes()
                .filter(|b| *b == b'\n')
                .count();
            self.counted = at;
        }
        self.lines + 1
    }

    fn this_item(&mut self, kind: Kind) -> Item<'a> {
        let line = self.line_of(self.start);
        let item = Item {
            kind,
            pos: self.start,
            line,
            val: self.input[self.start..self.pos].into(),
        };
        self.start = self.pos;
        item
    }

    fn emit(&mut self, kind: Kind) -> Option<State> {
        let item = self.this_item(kind);
        self.emit_item(item)
    }

    fn emit_item(&mut self, item: Item<'a>) -> Option<State> {
        if item.kind == Kind::Eof {
            self.done = true;
        }
        self.items.push(item);
        None
    }

    fn ignore(&mut self) {
        self.start = self.pos;
    }

    fn errorf(&mut self, message: String) -> Option<State> {
        let line = self.line_of(self.start);
        self.items.push(Item {
            kind: Kind::Error,
            pos: self.start,
            line,
            val: message.into(),
        });
        self.done = true;
        None
    }

    fn lex_text(&mut self) -> Option<State> {
        if let Some(x) = self.rest().find(LEFT) {
            if x > 0 {
                self.pos += x;
                let delim_end = self.pos + LEFT.len();
                let trim = if has_left_trim_marker(&self.input[delim_end..]) {
                    right_trim_length(&self.input[self.start..self.pos])
                } else {
                    0
                };
                self.pos -= trim;
                let item = self.this_item(Kind::Text);
                self.pos += trim;
                self.ignore();
                if !item.val.is_empty() {
                    return self.emit_item(item);
                }
            }
            return Some(State::LeftDelim);
        }
        self.pos = self.input.len();
        if self.pos > self.start {
            return self.emit(Kind::Text);
        }
        self.emit(Kind::Eof)
    }

    fn at_right_delim(&self) -> (bool, bool) {
        let rest = self.rest();
        if has_right_trim_marker(rest) && rest[TRIM_LEN..].starts_with(RIGHT) {
            return (true, true);
        }
        (rest.starts_with(RIGHT), false)
    }

    fn lex_left_delim(&mut self) -> Option<State> {
        self.pos += LEFT.len();
        let after_marker = if has_left_trim_marker(self.rest()) {
            TRIM_LEN
        } else {
            0
        };
        if self.input[self.pos + after_marker..].starts_with(LEFT_COMMENT) {
            self.pos += after_marker;
            self.ignore();
            return Some(State::Comment);
        }
        let item = self.this_item(Kind::LeftDelim);
        self.inside_action = true;
        self.pos += after_marker;
        self.ignore();
        self.paren_depth = 0;
        self.emit_item(item)
    }

    fn lex_comment(&mut self) -> Option<State> {
        self.pos += LEFT_COMMENT.len();
        let Some(x) = self.rest().find(RIGHT_COMMENT) else {
            return self.errorf("unclosed comment".into());
        };
        self.pos += x + RIGHT_COMMENT.len();
        let (delim, trim) = self.at_right_delim();
        if !delim {
            return self.errorf("comment ends before closing delimiter".into());
        }
        if trim {
            self.pos += TRIM_LEN;
        }
        self.pos += RIGHT.len();
        if trim {
            self.pos += left_trim_length(self.rest());
        }
        self.ignore();
        // Comments are not emitted (no ParseComments).
        Some(State::Text)
    }

    fn lex_right_delim(&mut self) -> Option<State> {
        let (_, trim) = self.at_right_delim();
        if trim {
            self.pos += TRIM_LEN;
            self.ignore();
        }
        self.pos += RIGHT.len();
        let item = self.this_item(Kind::RightDelim);
        if trim {
            self.pos += left_trim_length(self.rest());
            self.ignore();
        }
        self.inside_action = false;
        self.emit_item(item)
    }

    fn lex_inside_action(&mut self) -> Option<State> {
        if self.at_right_delim().0 {
            if self.paren_depth == 0 {
                return Some(State::RightDelim);
            }
            return self.errorf("unclosed left paren".into());
        }
        let r = self.next();
        let Some(c) = r else {
            return self.errorf("unclosed action".into());
        };
        match c {
            _ if is_space(c) => {
                self.backup();
                Some(State::Space)
            }
            '=' => self.emit(Kind::Assign),
            ':' => {
                if self.next() != Some('=') {
                    return self.errorf("expected :=".into());
                }
                self.emit(Kind::Declare)
            }
            '|' => self.emit(Kind::Pipe),
            '"' => Some(State::Quote),
            '`' => Some(State::RawQuote),
            '$' => Some(State::Variable),
            '\'' => Some(State::Char),
            '.' if self
                .input
                .as_bytes()
                .get(self.pos)
                .is_some_and(|b| !b.is_ascii_digit()) =>
            {
                Some(State::Field)
            }
            '.' | '+' | '-' | '0'..='9' => {
                self.backup();
                Some(State::Number)
            }
            _ if is_alphanumeric(c) => {
                self.backup();
                Some(State::Identifier)
            }
            '(' => {
                self.paren_depth += 1;
                self.emit(Kind::LeftParen)
            }
            ')' => {
                self.paren_depth -= 1;
                if self.paren_depth < 0 {
                    return self.errorf("unexpected right paren".into());
                }
                self.emit(Kind::RightParen)
            }
            // Go's `unicode.IsPrint` of an ASCII rune: ' ' to '~'.
            ' '..='~' => self.emit(Kind::Char),
            _ => self.errorf(format!(
                "unrecognized character in action: {}",
                describe(Some(c))
            )),
        }
    }

    fn lex_space(&mut self) -> Option<State> {
        let mut spaces = 0;
        while self.peek().is_some_and(is_space) {
            self.next();
            spaces += 1;
        }
        // A trim-marked closing delimiter starts with a space.
        let before = &self.input[self.pos - 1..];
        if has_right_trim_marker(before) && before[TRIM_LEN..].starts_with(RIGHT) {
            self.backup();
            if spaces == 1 {
                return Some(State::RightDelim);
            }
        }
        self.emit(Kind::Space)
    }

    fn at_terminator(&mut self) -> bool {
        match self.peek() {
            None => true,
            Some(c) if is_space(c) => true,
            Some('.' | ',' | '|' | ':' | ')' | '(') => true,
            Some(_) => self.rest().starts_with(RIGHT),
        }
    }

    fn lex_identifier(&mut self) -> Option<State> {
        loop {
            let r = self.next();
            if r.is_some_and(is_alphanumeric) {
                continue;
            }
            self.backup();
            let word = &self.input[self.start..self.pos];
            if !self.at_terminator() {
                return self.errorf(format!("bad character {}", describe(r)));
            }
            let kind = match word {
                "block" => Kind::Block,
                "break" => Kind::Break,
                "continue" => Kind::Continue,
                "define" => Kind::Define,
                "else" => Kind::Else,
                "end" => Kind::End,
                "if" => Kind::If,
                "range" => Kind::Range,
                "nil" => Kind::Nil,
                "template" => Kind::Template,
                "with" => Kind::With,
                "true" | "false" => Kind::Bool,
                _ => Kind::Identifier,
            };
            return self.emit(kind);
        }
    }

    fn lex_variable(&mut self) -> Option<State> {
        if self.at_terminator() {
            return self.emit(Kind::Variable);
        }
        self.lex_field_or_variable(Kind::Variable)
    }

    fn lex_field_or_variable(&mut self, kind: Kind) -> Option<State> {
        if self.at_terminator() {
            return self.emit(if kind == Kind::Variable {
                Kind::Variable
            } else {
                Kind::Dot
            });
        }
        let r = loop {
            let r = self.next();
            if !r.is_some_and(is_alphanumeric) {
                self.backup();
                break r;
            }
        };
        if !self.at_terminator() {
            return self.errorf(format!("bad character {}", describe(r)));
        }
        self.emit(kind)
    }

    /// A quoted string or character constant; escapes are checked by the parser.
    fn lex_quoted(&mut self, quote: char, kind: Kind, what: &str) -> Option<State> {
        loop {
            match self.next() {
                Some('\\') => match self.next() {
                    None | Some('\n') => return self.errorf(format!("unterminated {what}")),
                    Some(_) => {}
                },
                None | Some('\n') => return self.errorf(format!("unterminated {what}")),
                Some(c) if c == quote => break,
                Some(_) => {}
            }
        }
        self.emit(kind)
    }

    fn lex_raw_quote(&mut self) -> Option<State> {
        loop {
            match self.next() {
                None => return self.errorf("unterminated raw quoted string".into()),
                Some('`') => break,
                Some(_) => {}
            }
        }
        self.emit(Kind::RawString)
    }

    fn lex_number(&mut self) -> Option<State> {
        let bad = |l: &Self| format!("bad number syntax: {:?}", &l.input[l.start..l.pos]);
        if !self.scan_number() {
            return self.errorf(bad(self));
        }
        if matches!(self.peek(), Some('+' | '-')) {
            // Complex: 1+2i, no spaces, ending in `i`.
            if !self.scan_number() || self.input.as_bytes()[self.pos - 1] != b'i' {
                return self.errorf(bad(self));
            }
            return self.emit(Kind::Complex);
        }
        self.emit(Kind::Number)
    }

    fn scan_number(&mut self) -> bool {
        self.accept("+-");
        let mut digits = "0123456789_";
        if self.accept("0") {
            if self.accept("xX") {
                digits = "0123456789abcdefABCDEF_";
            } else if self.accept("oO") {
                digits = "01234567_";
            } else if self.accept("bB") {
                digits = "01_";
            }
        }
        self.accept_run(digits);
        if self.accept(".") {
            self.accept_run(digits);
        }
        if digits.len() == 11 && self.accept("eE") {
            self.accept("+-");
            self.accept_run("0123456789_");
        }
        if digits.len() == 23 && self.accept("pP") {
            self.accept("+-");
            self.accept_run("0123456789_");
        }
        self.accept("i");
        if self.peek().is_some_and(is_alphanumeric) {
            self.next();
            return false;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(t: &str) -> Vec<(Kind, std::string::String)> {
        lex(t)
            .into_iter()
            .map(|i| (i.kind, i.val.to_string()))
            .collect()
    }

    fn k(kind: Kind, v: &str) -> (Kind, std::string::String) {
        (kind, v.to_string())
    }

    use Kind::*;

    #[test]
    fn a_quoted_right_delimiter_does_not_end_the_action() {
        assert_eq!(
            kinds(r#"{{ "}}" }}{{ env "X" }}"#),
            [
                k(LeftDelim, "{{"),
                k(Space, " "),
                k(String, r#""}}""#),
                k(Space, " "),
                k(RightDelim, "}}"),
                k(LeftDelim, "{{"),
                k(Space, " "),
                k(Identifier, "env"),
                k(Space, " "),
                k(String, r#""X""#),
                k(Space, " "),
                k(RightDelim, "}}"),
                k(Eof, ""),
            ]
        );
        assert_eq!(
            kinds("{{`}}`|env}}"),
            [
                k(LeftDelim, "{{"),
                k(RawString, "`}}`"),
                k(Pipe, "|"),
                k(Identifier, "env"),
                k(RightDelim, "}}"),
                k(Eof, ""),
            ]
        );
        assert_eq!(
            kinds(r#"{{ '}' }}"#)[2],
            k(CharConstant, "'}'"),
            "a character constant"
        );
    }

    #[test]
    fn trim_markers_need_a_space_and_trim_the_text_beside_them() {
        assert_eq!(
            kinds("a \n{{- 3 -}}\n b"),
            [
                k(Text, "a"),
                k(LeftDelim, "{{"),
                k(Number, "3"),
                k(RightDelim, "}}"),
                k(Text, "b"),
                k(Eof, ""),
            ]
        );
        // Without the space, `-3` is a number.
        assert_eq!(kinds("{{-3}}")[1], k(Number, "-3"));
        assert_eq!(kinds("{{3 -}}")[2], k(RightDelim, "}}"));
    }

    #[test]
    fn comments_are_dropped_and_must_touch_their_delimiters() {
        assert_eq!(
            kinds("a{{/* }} {{ env */}}b{{- /* x */ -}} c"),
            [k(Text, "a"), k(Text, "b"), k(Text, "c"), k(Eof, "")]
        );
        assert_eq!(
            kinds("{{/* x */ }}").last().unwrap(),
            &k(Error, "comment ends before closing delimiter")
        );
        assert_eq!(
            kinds("{{/* x").last().unwrap(),
            &k(Error, "unclosed comment")
        );
        // `{{ /*` is not a comment: `/` is a character of the action.
        assert_eq!(kinds("{{ /* x */ }}")[2], k(Char, "/"));
    }

    #[test]
    fn fields_variables_and_identifiers() {
        assert_eq!(
            kinds("{{$x := .A.b|f (g .)}}"),
            [
                k(LeftDelim, "{{"),
                k(Variable, "$x"),
                k(Space, " "),
                k(Declare, ":="),
                k(Space, " "),
                k(Field, ".A"),
                k(Field, ".b"),
                k(Pipe, "|"),
                k(Identifier, "f"),
                k(Space, " "),
                k(LeftParen, "("),
                k(Identifier, "g"),
                k(Space, " "),
                k(Dot, "."),
                k(RightParen, ")"),
                k(RightDelim, "}}"),
                k(Eof, ""),
            ]
        );
        // A number, not a field.
        assert_eq!(kinds("{{.5}}")[1], k(Number, ".5"));
        // Keywords, booleans, nil.
        assert_eq!(
            kinds("{{if true}}{{else}}{{end}}")
                .into_iter()
                .map(|(k, _)| k)
                .collect::<Vec<_>>(),
            [
                LeftDelim, If, Space, Bool, RightDelim, LeftDelim, Else, RightDelim, LeftDelim,
                End, RightDelim, Eof
            ]
        );
        // An identifier must end at a terminator.
        assert_eq!(
            kinds("{{env\"X\"}}").last().unwrap(),
            &k(Error, "bad character U+0022 '\"'")
        );
        // Go's letters are category L: a Roman numeral (Nl) is none, an Arabic-Indic digit is.
        assert!(!is_alphanumeric('Ⅰ') && is_alphanumeric('٣') && is_alphanumeric('é'));
    }

    #[test]
    fn errors_end_the_tokens_with_the_line_they_start_on() {
        let items = lex("a\n{{ \"x\n\" }}");
        let last = items.last().unwrap();
        assert_eq!(
            (last.kind, last.line, last.val.as_ref()),
            (Error, 2, "unterminated quoted string")
        );
        for (t, msg) in [
            ("{{ (x }}", "unclosed left paren"),
            ("{{ x) }}", "unexpected right paren"),
            ("{{ x", "unclosed action"),
            ("{{ a:b }}", "expected :="),
            ("{{ 3x }}", "bad number syntax: \"3x\""),
            ("{{ 1+2 }}", "bad number syntax: \"1+2\""),
            ("{{ 'a }}", "unterminated character constant"),
            ("{{ `a }}", "unterminated raw quoted string"),
            ("{{ é… }}", "bad character U+2026 '…'"),
            ("{{ \u{7f} }}", "unrecognized character in action: U+007F"),
        ] {
            assert_eq!(lex(t).last().unwrap().val, msg, "{t}");
        }
        assert_eq!(kinds("{{ 1+2i }}")[2], k(Complex, "1+2i"));
    }
}
