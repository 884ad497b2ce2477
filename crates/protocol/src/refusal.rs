//! [`Refusal`]: why a command was refused before the log — the one list of codes
//! 1000 and up, defined here and nowhere else.
//!
//! An engine rejection ([`bourse_engine::Reject`], codes below 1000) is the engine's
//! verdict on a command it applied. A refusal is given before the log, by the node
//! (the command's shape is wrong, or its sender may not send it) or by a gateway (the
//! key may not send it, or the session is over its limits): nothing was applied, the
//! seq is not used up, and the client may correct the command and send it again.
//! Every front end presents these codes unchanged (REST's error body, FIX's `Text`,
//! XML's error element); docs/ARCHITECTURE.md, "The front-end port", says how.
//!
//! | code | name | who | meaning |
//! |---:|---|---|---|
//! | 1000 | `field_missing` | node | a oneof or required field is absent |
//! | 1001 | `enum_unspecified` | node | an enum holds its zero (`*_UNSPECIFIED`) value |
//! | 1002 | `enum_unknown` | node | an enum holds a number this version does not know |
//! | 1003 | `value_out_of_range` | node | a number does not fit the engine's type |
//! | 1004 | `not_authorized` | node, gateway | the sender may not send this command |
//! | 1005 | `rate_limited` | gateway | the session's command rate is spent: wait and resend |
//! | 1006 | `in_flight_limit` | gateway | too many commands unanswered: wait for acks and resend |

/// A refusal before the log (see the module documentation for the table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    FieldMissing,
    EnumUnspecified,
    EnumUnknown,
    ValueOutOfRange,
    NotAuthorized,
    RateLimited,
    InFlightLimit,
}

impl Refusal {
    /// Every refusal, by code.
    pub const ALL: [Refusal; 7] = [
        Refusal::FieldMissing,
        Refusal::EnumUnspecified,
        Refusal::EnumUnknown,
        Refusal::ValueOutOfRange,
        Refusal::NotAuthorized,
        Refusal::RateLimited,
        Refusal::InFlightLimit,
    ];

    /// The stable code on the wire (`RejectInfo.code`).
    pub const fn code(self) -> u32 {
        match self {
            Refusal::FieldMissing => 1000,
            Refusal::EnumUnspecified => 1001,
            Refusal::EnumUnknown => 1002,
            Refusal::ValueOutOfRange => 1003,
            Refusal::NotAuthorized => 1004,
            Refusal::RateLimited => 1005,
            Refusal::InFlightLimit => 1006,
        }
    }

    /// The stable snake_case name on the wire (`RejectInfo.name`).
    pub const fn name(self) -> &'static str {
        match self {
            Refusal::FieldMissing => "field_missing",
            Refusal::EnumUnspecified => "enum_unspecified",
            Refusal::EnumUnknown => "enum_unknown",
            Refusal::ValueOutOfRange => "value_out_of_range",
            Refusal::NotAuthorized => "not_authorized",
            Refusal::RateLimited => "rate_limited",
            Refusal::InFlightLimit => "in_flight_limit",
        }
    }

    /// The refusal with this code; `None` for an engine rejection's code or one this
    /// version does not know.
    pub fn from_code(code: u32) -> Option<Refusal> {
        Refusal::ALL.into_iter().find(|refusal| refusal.code() == code)
    }

    /// Whether the same command may succeed if sent again later unchanged: the
    /// session's limits, not the command, refused it.
    pub const fn is_transient(self) -> bool {
        matches!(self, Refusal::RateLimited | Refusal::InFlightLimit)
    }

    /// The refusal as `RejectInfo`, with `detail` saying what in particular.
    pub fn info(self, detail: impl Into<String>) -> crate::proto::RejectInfo {
        crate::proto::RejectInfo { code: self.code(), name: self.name().to_owned(), detail: detail.into() }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::Refusal;

    #[test]
    fn codes_and_names_are_distinct_and_read_back() {
        for refusal in Refusal::ALL {
            assert_eq!(Refusal::from_code(refusal.code()), Some(refusal));
            assert!(refusal.code() >= 1000, "refusals sit above every engine code");
            let same_name = Refusal::ALL.iter().filter(|other| other.name() == refusal.name()).count();
            assert_eq!(same_name, 1, "{refusal}");
        }
        assert_eq!(Refusal::from_code(999), None);
        assert_eq!(Refusal::from_code(1007), None);
        assert!(Refusal::RateLimited.is_transient() && !Refusal::NotAuthorized.is_transient());
    }

    #[test]
    fn the_documented_table_is_the_code() {
        let doc = include_str!("refusal.rs");
        for refusal in Refusal::ALL {
            let row = format!("| {} | `{}` |", refusal.code(), refusal.name());
            assert!(doc.contains(&row), "the table lacks {row}");
        }
    }
}
