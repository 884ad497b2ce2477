//! The request body: well-formed XML, then the protocol's shape (spec sections 2.4, 4,
//! 5 and 9).
//!
//! The whole body is checked before anything is executed, so a request-level error
//! changes nothing: valid UTF-8 with only characters XML allows, one root element,
//! matching end tags, well-formed attributes (quoted, no duplicates, no `<`, only the
//! five predefined entities and character references), no DOCTYPE (so no DTD, no
//! entity of the request's own, nothing external), an XML declaration only at the
//! very start and only for UTF-8, nothing but comments, processing instructions and
//! white space around the root. quick-xml reads the events; the rules it leaves to
//! its caller are checked here. Parsing never recurses and allocates at most in
//! proportion to the body, which the framing bounds.
//!
//! Values are kept as the request wrote them (unescaped, attribute values normalized as
//! XML requires), because replies echo them; their grammar is checked when executed,
//! in the order section 9 gives. Unknown attributes, text in elements that take none,
//! and elements inside elements that take none are ignored; elements with a namespace
//! prefix are unknown elements.

use quick_xml::events::attributes::Attribute;
use quick_xml::events::{BytesRef, BytesStart, Event};
use quick_xml::reader::Reader;
use quick_xml::XmlVersion;

/// A parsed request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Create(Vec<CreateChild>),
    /// `id` is the root's `id` attribute as written.
    Transactions {
        id: String,
        children: Vec<TxChild>,
    },
}

/// A child of `<create>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreateChild {
    Account { id: Option<String>, balance: Option<String> },
    Symbol { sym: Option<String>, accounts: Vec<SymbolChild> },
    Unknown(String),
}

/// A child of `<symbol>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SymbolChild {
    /// `<account id="ID">NUM</account>`; `shares` is the element's text.
    Account {
        id: Option<String>,
        shares: String,
    },
    Unknown(String),
}

/// A child of `<transactions>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxChild {
    Order { sym: Option<String>, amount: Option<String>, limit: Option<String> },
    Query { id: Option<String> },
    Cancel { id: Option<String> },
    Unknown(String),
}

/// Why a whole request is refused (its reply is `<results><error>TEXT</error></results>`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("Malformed XML")]
    MalformedXml,
    #[error("Unknown root element: {0}")]
    UnknownRoot(String),
    #[error("Missing attribute: id")]
    MissingRootId,
    #[error("Empty transactions")]
    EmptyTransactions,
    #[error("Too many children")]
    TooManyChildren,
}

/// What the parser is inside of.
enum Frame {
    Root,
    /// A `<symbol>`: index among the create children.
    Symbol(usize),
    /// An `<account>` inside a `<symbol>`, collecting its text.
    SymbolAccount(usize, usize),
    /// Content that is ignored.
    Other,
}

enum Root {
    Create,
    Transactions,
    Unknown(String),
}

struct Builder {
    root: Option<Root>,
    root_done: bool,
    root_id: Option<String>,
    create: Vec<CreateChild>,
    transactions: Vec<TxChild>,
    /// Result-producing children seen.
    results: usize,
    results_max: usize,
}

/// Parses one request body. `results_max` bounds the result-producing children.
pub fn parse(body: &[u8], results_max: usize) -> Result<Request, RequestError> {
    let text = std::str::from_utf8(body).map_err(|_| RequestError::MalformedXml)?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.is_empty() || !text.chars().all(xml_char) {
        return Err(RequestError::MalformedXml);
    }
    let mut builder = Builder {
        root: None,
        root_done: false,
        root_id: None,
        create: Vec::new(),
        transactions: Vec::new(),
        results: 0,
        results_max,
    };
    read(text, &mut builder).ok_or(RequestError::MalformedXml)?;
    builder.finish()
}

/// Walks the events; `None` when the document is not well-formed.
fn read(text: &str, builder: &mut Builder) -> Option<()> {
    let mut reader = Reader::from_str(text);
    reader.config_mut().check_comments = true;
    let mut stack: Vec<Frame> = Vec::new();
    let mut first = true;
    loop {
        let event = reader.read_event().ok()?;
        let at_start = std::mem::take(&mut first);
        match event {
            Event::Decl(decl) => {
                // Only as the very first thing, and only for UTF-8.
                if !at_start {
                    return None;
                }
                let encoding = decl.encoding().transpose().ok()?;
                if encoding.is_some_and(|e| !e.eq_ignore_ascii_case("utf-8")) {
                    return None;
                }
            }
            Event::DocType(_) => return None,
            Event::PI(pi) => {
                if pi.target().eq_ignore_ascii_case("xml") || !is_name(pi.target()) {
                    return None;
                }
            }
            Event::Comment(_) => {}
            Event::Start(start) => {
                let frame = builder.element(&start, stack.last())?;
                stack.push(frame);
            }
            Event::Empty(start) => {
                builder.element(&start, stack.last())?;
                if stack.is_empty() {
                    builder.root_done = true;
                }
            }
            Event::End(_) => {
                stack.pop()?;
                if stack.is_empty() {
                    builder.root_done = true;
                }
            }
            Event::Text(text) => {
                let content = text.xml10_content();
                match stack.last() {
                    None if content.chars().all(|c| matches!(c, ' ' | '\t' | '\r' | '\n')) => {}
                    None => return None,
                    Some(frame) => builder.text(frame, &content),
                }
            }
            Event::CData(data) => {
                let frame = stack.last()?;
                builder.text(frame, &data.xml10_content());
            }
            Event::GeneralRef(reference) => {
                let frame = stack.last()?;
                let resolved = resolve(&reference)?;
                builder.text(frame, &resolved);
            }
            Event::Eof => return (builder.root_done && stack.is_empty()).then_some(()),
        }
    }
}

/// A character reference or one of the five predefined entities.
fn resolve(reference: &BytesRef<'_>) -> Option<String> {
    if reference.is_char_ref() {
        let c = reference.resolve_char_ref().ok()??;
        return xml_char(c).then(|| c.to_string());
    }
    let name = reference.xml10_content();
    quick_xml::escape::resolve_predefined_entity(&name).map(str::to_owned)
}

/// Characters XML 1.0 allows in a document.
fn xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | ' '..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
}

/// An XML name (approximately: ASCII letters, `_`, `:` or any non-ASCII character
/// first; then also digits, `-` and `.`).
fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    let start = |c: char| c.is_ascii_alphabetic() || c == '_' || c == ':' || !c.is_ascii();
    chars.next().is_some_and(start) && chars.all(|c| start(c) || c.is_ascii_digit() || c == '-' || c == '.')
}

/// The element's name and attributes (name, normalized value), checked.
fn element_parts(start: &BytesStart<'_>) -> Option<(String, Vec<(String, String)>)> {
    let name = start.name().as_ref().to_owned();
    if !is_name(&name) {
        return None;
    }
    let mut attributes = Vec::new();
    for attribute in start.attributes().with_checks(true) {
        let attribute: Attribute<'_> = attribute.ok()?;
        let key: &str = attribute.key.as_ref();
        if !is_name(key) || attribute.value.contains('<') {
            return None;
        }
        let value = attribute.normalized_value(XmlVersion::Implicit1_0).ok()?;
        // A character reference may name a character XML does not allow (`&#4;`).
        if !value.chars().all(xml_char) {
            return None;
        }
        attributes.push((key.to_owned(), value.into_owned()));
    }
    Some((name, attributes))
}

fn take(attributes: &mut Vec<(String, String)>, name: &str) -> Option<String> {
    let at = attributes.iter().position(|(key, _)| key == name)?;
    Some(attributes.swap_remove(at).1)
}

impl Builder {
    /// Handles an element start under `parent`; returns the frame its content is read in.
    fn element(&mut self, start: &BytesStart<'_>, parent: Option<&Frame>) -> Option<Frame> {
        let (name, mut attributes) = element_parts(start)?;
        let Some(parent) = parent else {
            if self.root.is_some() {
                return None; // a second root element
            }
            self.root = Some(match name.as_str() {
                "create" => Root::Create,
                "transactions" => {
                    self.root_id = take(&mut attributes, "id");
                    Root::Transactions
                }
                _ => Root::Unknown(name),
            });
            return Some(Frame::Root);
        };
        Some(match parent {
            Frame::Root => match self.root {
                Some(Root::Create) => self.create_child(name, attributes),
                Some(Root::Transactions) => {
                    let child = match name.as_str() {
                        "order" => TxChild::Order {
                            sym: take(&mut attributes, "sym"),
                            amount: take(&mut attributes, "amount"),
                            limit: take(&mut attributes, "limit"),
                        },
                        "query" => TxChild::Query { id: take(&mut attributes, "id") },
                        "cancel" => TxChild::Cancel { id: take(&mut attributes, "id") },
                        _ => TxChild::Unknown(name),
                    };
                    if self.count() {
                        self.transactions.push(child);
                    }
                    Frame::Other
                }
                _ => Frame::Other,
            },
            &Frame::Symbol(index) => {
                let child = match name.as_str() {
                    "account" => SymbolChild::Account { id: take(&mut attributes, "id"), shares: String::new() },
                    _ => SymbolChild::Unknown(name),
                };
                let collect = matches!(child, SymbolChild::Account { .. });
                if !self.count() {
                    return Some(Frame::Other);
                }
                let Some(CreateChild::Symbol { accounts, .. }) = self.create.get_mut(index) else {
                    unreachable!("a symbol frame names a symbol child");
                };
                accounts.push(child);
                if collect {
                    Frame::SymbolAccount(index, accounts.len() - 1)
                } else {
                    Frame::Other
                }
            }
            Frame::SymbolAccount(..) | Frame::Other => Frame::Other,
        })
    }

    fn create_child(&mut self, name: String, mut attributes: Vec<(String, String)>) -> Frame {
        match name.as_str() {
            "account" => {
                let child =
                    CreateChild::Account { id: take(&mut attributes, "id"), balance: take(&mut attributes, "balance") };
                if self.count() {
                    self.create.push(child);
                }
                Frame::Other
            }
            "symbol" => {
                // No result of its own: one per nested account.
                if self.results > self.results_max {
                    return Frame::Other;
                }
                self.create.push(CreateChild::Symbol { sym: take(&mut attributes, "sym"), accounts: Vec::new() });
                Frame::Symbol(self.create.len() - 1)
            }
            _ => {
                if self.count() {
                    self.create.push(CreateChild::Unknown(name));
                }
                Frame::Other
            }
        }
    }

    /// Counts one result-producing child; false once past the bound (it is then not
    /// kept: the request will be refused whole).
    fn count(&mut self) -> bool {
        self.results += 1;
        self.results <= self.results_max
    }

    fn text(&mut self, frame: &Frame, text: &str) {
        if let &Frame::SymbolAccount(index, account) = frame {
            if let Some(CreateChild::Symbol { accounts, .. }) = self.create.get_mut(index) {
                if let Some(SymbolChild::Account { shares, .. }) = accounts.get_mut(account) {
                    shares.push_str(text);
                }
            }
        }
    }

    fn finish(self) -> Result<Request, RequestError> {
        match self.root {
            None => Err(RequestError::MalformedXml),
            Some(Root::Unknown(name)) => Err(RequestError::UnknownRoot(name)),
            Some(Root::Create) if self.results > self.results_max => Err(RequestError::TooManyChildren),
            Some(Root::Create) => Ok(Request::Create(self.create)),
            Some(Root::Transactions) => {
                let id = self.root_id.ok_or(RequestError::MissingRootId)?;
                if self.results == 0 {
                    return Err(RequestError::EmptyTransactions);
                }
                if self.results > self.results_max {
                    return Err(RequestError::TooManyChildren);
                }
                Ok(Request::Transactions { id, children: self.transactions })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(body: &str) -> Request {
        parse(body.as_bytes(), 10_000).unwrap_or_else(|e| panic!("{body:?}: {e}"))
    }

    fn err(body: &str) -> RequestError {
        parse(body.as_bytes(), 10_000).expect_err(body)
    }

    #[test]
    fn the_spec_example_create() {
        let body = "<create>\n  <account id=\"42\" balance=\"1000\"/>\n  <symbol sym=\"ACME\">\n    <account id=\"42\">10</account>\n  </symbol>\n</create>\n";
        assert_eq!(body.len(), 123);
        assert_eq!(
            ok(body),
            Request::Create(vec![
                CreateChild::Account { id: Some("42".into()), balance: Some("1000".into()) },
                CreateChild::Symbol {
                    sym: Some("ACME".into()),
                    accounts: vec![SymbolChild::Account { id: Some("42".into()), shares: "10".into() }]
                },
            ])
        );
    }

    #[test]
    fn transactions_keep_values_as_written_and_ignore_the_rest() {
        let body = "<?xml version=\"1.0\" encoding=\"utf-8\"?><!-- hi --><transactions id=\" 7\" extra=\"x\">\
            <order sym=\"A&amp;B\" amount=\"-1\" limit=\"2&#46;5\" foo=\"bar\">text<x/></order>\
            <query id=\"3\"/><cancel/><a:order/><bogus>?</bogus></transactions>\n<?pi ok?>";
        assert_eq!(
            ok(body),
            Request::Transactions {
                id: " 7".into(),
                children: vec![
                    TxChild::Order { sym: Some("A&B".into()), amount: Some("-1".into()), limit: Some("2.5".into()) },
                    TxChild::Query { id: Some("3".into()) },
                    TxChild::Cancel { id: None },
                    TxChild::Unknown("a:order".into()),
                    TxChild::Unknown("bogus".into()),
                ]
            }
        );
    }

    #[test]
    fn symbol_account_text_is_joined_and_attribute_whitespace_normalized() {
        let body = "<create><symbol sym=\"X\"><account id=\"1\"> 1<!--c-->0<![CDATA[.5]]>&#x30; </account><nope/></symbol><symbol/></create>";
        assert_eq!(
            ok(body),
            Request::Create(vec![
                CreateChild::Symbol {
                    sym: Some("X".into()),
                    accounts: vec![
                        SymbolChild::Account { id: Some("1".into()), shares: " 10.50 ".into() },
                        SymbolChild::Unknown("nope".into()),
                    ]
                },
                CreateChild::Symbol { sym: None, accounts: vec![] },
            ])
        );
        assert_eq!(
            ok("<create><account id=\"1\n2\" balance=\"&#10;3\"/></create>"),
            Request::Create(vec![CreateChild::Account { id: Some("1 2".into()), balance: Some("\n3".into()) }])
        );
    }

    #[test]
    fn request_level_errors() {
        assert_eq!(err("<foo/>"), RequestError::UnknownRoot("foo".into()));
        assert_eq!(err("<x:create/>"), RequestError::UnknownRoot("x:create".into()));
        assert_eq!(err("<transactions><query id=\"1\"/></transactions>"), RequestError::MissingRootId);
        assert_eq!(err("<transactions id=\"1\">  </transactions>"), RequestError::EmptyTransactions);
        assert_eq!(err("<transactions id=\"1\"/>"), RequestError::EmptyTransactions);
        assert_eq!(ok("<create/>"), Request::Create(vec![]));
        let many = format!("<transactions id=\"1\">{}</transactions>", "<query id=\"1\"/>".repeat(3));
        assert_eq!(parse(many.as_bytes(), 3).map(|_| ()), Ok(()));
        assert_eq!(parse(many.as_bytes(), 2), Err(RequestError::TooManyChildren));
        let symbols = "<create><symbol sym=\"A\"><account id=\"1\">1</account><account id=\"1\">1</account></symbol><symbol sym=\"B\"/></create>";
        assert_eq!(parse(symbols.as_bytes(), 1), Err(RequestError::TooManyChildren));
        assert!(parse(symbols.as_bytes(), 2).is_ok(), "a symbol produces no result of its own");
    }

    #[test]
    fn malformed_documents() {
        for body in [
            "",
            " ",
            "<create>",
            "<create></transactions>",
            "<create/><create/>",
            "<create/>junk",
            "junk<create/>",
            " <?xml version=\"1.0\"?><create/>",
            "<create/><?xml version=\"1.0\"?>",
            "<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?><create/>",
            "<!DOCTYPE create><create/>",
            "<!DOCTYPE x [<!ENTITY a \"b\">]><create>&a;</create>",
            "<create a=\"1\" a=\"2\"/>",
            "<create a=1/>",
            "<create a=\"<\"/>",
            "<create a=\"&bogus;\"/>",
            "<create>&bogus;</create>",
            "<create>&#0;</create>",
            "<create a=\"&#4;\"/>",
            "<create>& </create>",
            "<create><!-- a -- b --></create>",
            "<1create/>",
            "<create>\u{1}</create>",
            "&amp;<create/>",
            "<![CDATA[x]]><create/>",
        ] {
            assert_eq!(parse(body.as_bytes(), 10), Err(RequestError::MalformedXml), "{body:?}");
        }
        assert_eq!(parse(b"<create>\xff</create>", 10), Err(RequestError::MalformedXml));
        assert_eq!(parse("\u{feff}<create/>".as_bytes(), 10), Ok(Request::Create(vec![])));
    }
}
