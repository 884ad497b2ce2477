//! The reply document in its one canonical byte form (spec section 2.5).
//!
//! `<?xml version="1.0" encoding="UTF-8"?>` then `<results>` at column 0, its children
//! indented 2 spaces and theirs 4, one element per line, LF line ends and a final LF;
//! `<results/>` when there is nothing to say. Empty elements close with `/>` and no
//! space; attributes come in the order of the spec's tables; `& < > "` are escaped in
//! attribute values and `& < >` in text. Numbers arrive here already written
//! ([`crate::value::format_scaled`]).

/// One result: what a child of the request produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// `<created id="ID"/>`: an account was created.
    Created { id: String },
    /// `<created sym="SYM" id="ID"/>`: shares were credited.
    Credited { sym: String, id: String },
    /// `<opened sym amount limit id/>`: an order was accepted.
    Opened { sym: String, amount: String, limit: String, id: u64 },
    /// `<status id>` with `open` or `canceled`, then the fills.
    Status { id: String, report: OrderReport },
    /// `<canceled id>` with `canceled`, then the fills.
    Canceled { id: String, report: OrderReport },
    /// `<error …>TEXT</error>` with the identifying attributes the request carried.
    Error { attrs: Vec<(&'static str, String)>, text: String },
}

/// What `<status>` and `<canceled>` hold, numbers already written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OrderReport {
    /// Open shares (only in `<status>`, never with `canceled`).
    pub open: Option<String>,
    /// Cancelled shares and when.
    pub canceled: Option<(String, u64)>,
    /// Each fill: shares, price, time; in execution order.
    pub executed: Vec<(String, String, u64)>,
}

const HEADER: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";

/// The whole reply document for these results.
pub fn document(items: &[Item]) -> Vec<u8> {
    let mut out = String::with_capacity(HEADER.len() + 24 + items.len() * 64);
    out.push_str(HEADER);
    if items.is_empty() {
        out.push_str("<results/>\n");
        return out.into_bytes();
    }
    out.push_str("<results>\n");
    for item in items {
        write_item(&mut out, item);
    }
    out.push_str("</results>\n");
    out.into_bytes()
}

/// A request-level error: `<results><error>TEXT</error></results>`.
pub fn request_error(text: &str) -> Vec<u8> {
    document(&[Item::Error { attrs: Vec::new(), text: text.to_owned() }])
}

fn write_item(out: &mut String, item: &Item) {
    match item {
        Item::Created { id } => leaf(out, 2, "created", &[("id", id)]),
        Item::Credited { sym, id } => leaf(out, 2, "created", &[("sym", sym), ("id", id)]),
        Item::Opened { sym, amount, limit, id } => {
            let id = id.to_string();
            leaf(out, 2, "opened", &[("sym", sym), ("amount", amount), ("limit", limit), ("id", &id)]);
        }
        Item::Status { id, report } => write_report(out, "status", id, report),
        Item::Canceled { id, report } => write_report(out, "canceled", id, report),
        Item::Error { attrs, text } => {
            out.push_str("  <error");
            for (name, value) in attrs {
                attribute(out, name, value);
            }
            out.push('>');
            escape_text(out, text);
            out.push_str("</error>\n");
        }
    }
}

fn write_report(out: &mut String, name: &str, id: &str, report: &OrderReport) {
    let empty = report.open.is_none() && report.canceled.is_none() && report.executed.is_empty();
    if empty {
        return leaf(out, 2, name, &[("id", id)]);
    }
    start(out, 2, name, &[("id", id)]);
    if let Some(shares) = &report.open {
        leaf(out, 4, "open", &[("shares", shares)]);
    }
    if let Some((shares, time)) = &report.canceled {
        leaf(out, 4, "canceled", &[("shares", shares), ("time", &time.to_string())]);
    }
    for (shares, price, time) in &report.executed {
        leaf(out, 4, "executed", &[("shares", shares), ("price", price), ("time", &time.to_string())]);
    }
    out.push_str("  </");
    out.push_str(name);
    out.push_str(">\n");
}

fn start(out: &mut String, indent: usize, name: &str, attrs: &[(&str, &str)]) {
    out.extend(std::iter::repeat_n(' ', indent));
    out.push('<');
    out.push_str(name);
    for (name, value) in attrs {
        attribute(out, name, value);
    }
    out.push_str(">\n");
}

fn leaf(out: &mut String, indent: usize, name: &str, attrs: &[(&str, &str)]) {
    out.extend(std::iter::repeat_n(' ', indent));
    out.push('<');
    out.push_str(name);
    for (name, value) in attrs {
        attribute(out, name, value);
    }
    out.push_str("/>\n");
}

fn attribute(out: &mut String, name: &str, value: &str) {
    out.push(' ');
    out.push_str(name);
    out.push_str("=\"");
    for c in value.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn escape_text(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(bytes: Vec<u8>) -> String {
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn the_spec_example_byte_for_byte() {
        let reply =
            document(&[Item::Created { id: "42".into() }, Item::Credited { sym: "ACME".into(), id: "42".into() }]);
        let expected = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<results>\n  <created id=\"42\"/>\n  <created sym=\"ACME\" id=\"42\"/>\n</results>\n";
        assert_eq!(text(reply), expected);
        assert_eq!(expected.len(), 113, "the spec's reply is 113 bytes");
    }

    #[test]
    fn empty_results_and_request_errors() {
        assert_eq!(text(document(&[])), "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<results/>\n");
        assert_eq!(
            text(request_error("Unknown root element: a<b")),
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<results>\n  <error>Unknown root element: a&lt;b</error>\n</results>\n"
        );
    }

    #[test]
    fn status_with_children_and_escaped_echoes() {
        let report = OrderReport {
            open: Some("7".into()),
            canceled: None,
            executed: vec![("3".into(), "12".into(), 1_732_270_800)],
        };
        let reply = document(&[
            Item::Opened { sym: "ACME".into(), amount: "-4".into(), limit: "12.5".into(), id: 8 },
            Item::Status { id: "7".into(), report },
            Item::Error { attrs: vec![("id", "\"&<>'".into())], text: "Unknown transaction".into() },
            Item::Canceled { id: "9".into(), report: OrderReport::default() },
        ]);
        let expected = concat!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<results>\n",
            "  <opened sym=\"ACME\" amount=\"-4\" limit=\"12.5\" id=\"8\"/>\n",
            "  <status id=\"7\">\n",
            "    <open shares=\"7\"/>\n",
            "    <executed shares=\"3\" price=\"12\" time=\"1732270800\"/>\n",
            "  </status>\n",
            "  <error id=\"&quot;&amp;&lt;&gt;'\">Unknown transaction</error>\n",
            "  <canceled id=\"9\"/>\n",
            "</results>\n"
        );
        assert_eq!(text(reply), expected);
    }
}
