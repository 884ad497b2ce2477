//! The closed set of reasons a command is refused.
//!
//! A rejected command changes nothing but the client's exactly-once record. Codes are
//! stable: they go on the wire and into audit logs, so a variant is never renumbered,
//! only added.

use serde::{Deserialize, Serialize};

macro_rules! rejects {
    ($($variant:ident = $code:literal, $name:literal;)*) => {
        /// Why a command was refused. Names read as the rule that was broken.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[repr(u16)]
        pub enum Reject {
            $($variant = $code,)*
        }

        impl Reject {
            /// Every variant, in code order.
            pub const ALL: &'static [Reject] = &[$(Reject::$variant,)*];

            /// The stable numeric code.
            pub fn code(self) -> u16 {
                self as u16
            }

            /// The stable snake_case name.
            pub fn name(self) -> &'static str {
                match self {
                    $(Reject::$variant => $name,)*
                }
            }

            /// The variant with this code, if any.
            pub fn from_code(code: u16) -> Option<Reject> {
                match code {
                    $($code => Some(Reject::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

rejects! {
    AccountUnknown = 1, "account_unknown";
    AssetUnknown = 2, "asset_unknown";
    SymbolUnknown = 3, "symbol_unknown";
    OrderUnknown = 4, "order_unknown";
    OrderNotOwned = 5, "order_not_owned";
    AccountSuspended = 6, "account_suspended";
    PxMustBeMultipleOfTick = 7, "px_must_be_multiple_of_tick";
    PxOutOfBounds = 8, "px_out_of_bounds";
    QtyMustBePositive = 9, "qty_must_be_positive";
    QtyMustBeMultipleOfLot = 10, "qty_must_be_multiple_of_lot";
    AmountMustBePositive = 11, "amount_must_be_positive";
    AmountOverflow = 12, "amount_overflow";
    BalanceInsufficient = 13, "balance_insufficient";
    PostOnlyWouldTrade = 14, "post_only_would_trade";
    PostOnlyRequiresGtcLimit = 15, "post_only_requires_gtc_limit";
    MarketOrderCannotRest = 16, "market_order_cannot_rest";
    MarketBuyRequiresBudget = 17, "market_buy_requires_budget";
    BudgetRequiresMarketOrFok = 18, "budget_requires_market_buy_or_fok";
    IcebergRequiresGtcLimit = 19, "iceberg_requires_gtc_limit";
    DisplayQtyInvalid = 20, "display_qty_invalid";
    FokCannotFill = 21, "fok_cannot_fill";
    OrderIsStop = 22, "order_is_stop";
    OpenOrdersLimit = 23, "open_orders_limit";
    NameInvalid = 24, "name_invalid";
    NameTaken = 25, "name_taken";
    SymbolSpecInvalid = 26, "symbol_spec_invalid";
    FeesInvalid = 27, "fees_invalid";
    SymbolAssetsMustDiffer = 28, "symbol_assets_must_differ";
    SequenceGap = 29, "sequence_gap";
    SequenceTooOld = 30, "sequence_too_old";
    LimitReached = 31, "limit_reached";
    AccountAlreadyInState = 32, "account_already_in_state";
    AccountIdTaken = 33, "account_id_taken";
    // A hold or window past FAIRNESS_NS_MAX.
    FairnessInvalid = 34, "fairness_invalid";
    // The exchange's own client (ClientId::SYSTEM) sends settings only.
    SystemCommandInvalid = 35, "system_command_invalid";
    // A day-trading entry no front end sends: too many or too long arguments, a quote
    // with a bad symbol, price or text (the checks users can fail are logged outcomes).
    DayTradingInvalid = 40, "day_trading_invalid";
    // Margin rules out of range, or a notional bound past MARGIN_NOTIONAL_MAX.
    MarginSpecInvalid = 41, "margin_spec_invalid";
    // The order (or withdrawal) would leave less free margin than it needs.
    MarginInsufficient = 42, "margin_insufficient";
    // The position, counting open orders as filled, would pass the symbol's limit.
    PositionLimit = 43, "position_limit";
    // A mark for a symbol that is not a margin symbol with an operator's mark.
    MarkNotSettable = 44, "mark_not_settable";
    // Margin orders hold margin, not a budget.
    BudgetNotForMargin = 45, "budget_not_for_margin";
    // A close of the day sent to groups while a book moves between two of them (the
    // partitioned exchange; one engine never gives it): send it again once the move
    // has finished.
    BookMoving = 46, "book_moving";
}

impl std::fmt::Display for Reject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_names_are_unique() {
        let mut names = std::collections::BTreeSet::new();
        for &reject in Reject::ALL {
            assert_eq!(Reject::from_code(reject.code()), Some(reject));
            assert!(names.insert(reject.name()), "duplicate name {}", reject.name());
        }
        assert_eq!(Reject::from_code(0), None);
    }
}
