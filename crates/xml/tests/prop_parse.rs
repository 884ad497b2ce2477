//! Property tests of the parser (no server needed): it never panics on any input,
//! valid documents damaged at random still get an answer, and attribute values of any
//! characters come back exactly as sent once escaped. Seeded by proptest; failures are
//! kept in `proptest-regressions/`.

use bourse_xml::parse::{parse, Request, RequestError, TxChild};
use bourse_xml::{reply, value};
use proptest::prelude::*;

const VALID: &[&str] = &[
    "<create>\n  <account id=\"42\" balance=\"1000\"/>\n  <symbol sym=\"ACME\">\n    <account id=\"42\">10</account>\n  </symbol>\n</create>\n",
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<transactions id=\"42\"><order sym=\"ACME\" amount=\"-4\" limit=\"12.5\"/><query id=\"7\"/><cancel id=\"8\"/></transactions>",
];

fn escape(value: &str) -> String {
    value.replace('&', "&amp;").replace('<', "&lt;").replace('"', "&quot;")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn prop_any_bytes_get_an_answer(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        bourse_xml::fuzzing::parse_and_answer(&bytes);
    }

    #[test]
    fn prop_damaged_documents_get_an_answer(
        which in 0..VALID.len(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..8),
    ) {
        let mut bytes = VALID[which].as_bytes().to_vec();
        for (at, byte, kind) in edits {
            let i = at.index(bytes.len() + 1);
            match kind {
                0 => bytes.insert(i, byte),
                1 if i < bytes.len() => { bytes.remove(i); }
                _ if i < bytes.len() => bytes[i] = byte,
                _ => {}
            }
        }
        // Whatever it is, the reply to it is a well-formed document (which this parser
        // reads as one whose root it does not serve), also when it echoes every value.
        bourse_xml::fuzzing::parse_and_answer(&bytes);
        let document = match parse(&bytes, 100) {
            Ok(_) => reply::document(&[]),
            Err(error) => reply::request_error(&error.to_string()),
        };
        prop_assert_eq!(parse(&document, 100), Err(RequestError::UnknownRoot("results".into())));
    }

    #[test]
    fn prop_attribute_values_come_back_exactly(value in "[^\u{0}-\u{8}\u{b}\u{c}\u{e}-\u{1f}\t\n\r\u{fffe}\u{ffff}]{0,24}") {
        let body = format!("<transactions id=\"1\"><query id=\"{}\"/></transactions>", escape(&value));
        let parsed = parse(body.as_bytes(), 10);
        prop_assert_eq!(parsed, Ok(Request::Transactions { id: "1".into(), children: vec![TxChild::Query { id: Some(value) }] }));
    }

    #[test]
    fn prop_decimals_round_trip(units in 1i64..i64::MAX, scale in 0u32..=8) {
        let written = value::format_scaled(units, scale);
        prop_assert_eq!(value::decimal(&written, scale, false), Some(units));
    }
}

#[test]
fn a_billion_laughs_is_refused_before_any_expansion() {
    let mut body = String::from("<?xml version=\"1.0\"?><!DOCTYPE lolz [<!ENTITY lol0 \"lol\">");
    for i in 1..10 {
        body.push_str(&format!("<!ENTITY lol{i} \"{}\">", format!("&lol{};", i - 1).repeat(10)));
    }
    body.push_str("]><create>&lol9;</create>");
    assert_eq!(parse(body.as_bytes(), 10), Err(RequestError::MalformedXml));
}
