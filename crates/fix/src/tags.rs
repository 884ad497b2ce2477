//! FIX 4.4 tag numbers and enumerated values this front end reads or writes.

pub const ACCOUNT: u32 = 1;
pub const AVG_PX: u32 = 6;
pub const BEGIN_SEQ_NO: u32 = 7;
pub const CL_ORD_ID: u32 = 11;
pub const CUM_QTY: u32 = 14;
pub const END_SEQ_NO: u32 = 16;
pub const EXEC_ID: u32 = 17;
pub const EXEC_INST: u32 = 18;
pub const LAST_PX: u32 = 31;
pub const LAST_QTY: u32 = 32;
pub const MSG_SEQ_NUM: u32 = 34;
pub const MSG_TYPE: u32 = 35;
pub const NEW_SEQ_NO: u32 = 36;
pub const ORDER_ID: u32 = 37;
pub const ORDER_QTY: u32 = 38;
pub const ORD_STATUS: u32 = 39;
pub const ORD_TYPE: u32 = 40;
pub const ORIG_CL_ORD_ID: u32 = 41;
pub const POSS_DUP_FLAG: u32 = 43;
pub const PRICE: u32 = 44;
pub const REF_SEQ_NUM: u32 = 45;
pub const SENDER_COMP_ID: u32 = 49;
pub const SENDING_TIME: u32 = 52;
pub const SIDE: u32 = 54;
pub const SYMBOL: u32 = 55;
pub const TARGET_COMP_ID: u32 = 56;
pub const TEXT: u32 = 58;
pub const TIME_IN_FORCE: u32 = 59;
pub const TRANSACT_TIME: u32 = 60;
pub const RAW_DATA: u32 = 96;
pub const POSS_RESEND: u32 = 97;
pub const ENCRYPT_METHOD: u32 = 98;
pub const STOP_PX: u32 = 99;
pub const CXL_REJ_REASON: u32 = 102;
pub const ORD_REJ_REASON: u32 = 103;
pub const HEART_BT_INT: u32 = 108;
pub const MAX_FLOOR: u32 = 111;
pub const TEST_REQ_ID: u32 = 112;
pub const ORIG_SENDING_TIME: u32 = 122;
pub const GAP_FILL_FLAG: u32 = 123;
pub const RESET_SEQ_NUM_FLAG: u32 = 141;
pub const NO_RELATED_SYM: u32 = 146;
pub const EXEC_TYPE: u32 = 150;
pub const LEAVES_QTY: u32 = 151;
pub const CASH_ORDER_QTY: u32 = 152;
pub const CONTRACT_MULTIPLIER: u32 = 231;
pub const MD_REQ_ID: u32 = 262;
pub const SUBSCRIPTION_REQUEST_TYPE: u32 = 263;
pub const MARKET_DEPTH: u32 = 264;
pub const MD_UPDATE_TYPE: u32 = 265;
pub const NO_MD_ENTRY_TYPES: u32 = 267;
pub const NO_MD_ENTRIES: u32 = 268;
pub const MD_ENTRY_TYPE: u32 = 269;
pub const MD_ENTRY_PX: u32 = 270;
pub const MD_ENTRY_SIZE: u32 = 271;
pub const MD_UPDATE_ACTION: u32 = 279;
pub const MD_REQ_REJ_REASON: u32 = 281;
pub const REF_TAG_ID: u32 = 371;
pub const REF_MSG_TYPE: u32 = 372;
pub const SESSION_REJECT_REASON: u32 = 373;
pub const BUSINESS_REJECT_REASON: u32 = 380;
pub const CXL_REJ_RESPONSE_TO: u32 = 434;
pub const PASSWORD: u32 = 554;
pub const ACCOUNT_TYPE: u32 = 581;
pub const NO_POSITIONS: u32 = 702;
pub const POS_TYPE: u32 = 703;
pub const LONG_QTY: u32 = 704;
pub const SHORT_QTY: u32 = 705;
pub const POS_AMT_TYPE: u32 = 707;
pub const POS_AMT: u32 = 708;
pub const POS_REQ_ID: u32 = 710;
pub const CLEARING_BUSINESS_DATE: u32 = 715;
pub const POS_MAINT_RPT_ID: u32 = 721;
pub const POS_REQ_TYPE: u32 = 724;
pub const TOTAL_NUM_POS_REPORTS: u32 = 727;
pub const POS_REQ_RESULT: u32 = 728;
pub const POS_REQ_STATUS: u32 = 729;
pub const SETTL_PRICE: u32 = 730;
pub const SETTL_PRICE_TYPE: u32 = 731;
pub const PRIOR_SETTL_PRICE: u32 = 734;
pub const NO_POS_AMT: u32 = 753;

/// MsgType (35) values.
pub mod msg {
    pub const HEARTBEAT: &str = "0";
    pub const TEST_REQUEST: &str = "1";
    pub const RESEND_REQUEST: &str = "2";
    pub const REJECT: &str = "3";
    pub const SEQUENCE_RESET: &str = "4";
    pub const LOGOUT: &str = "5";
    pub const EXECUTION_REPORT: &str = "8";
    pub const ORDER_CANCEL_REJECT: &str = "9";
    pub const LOGON: &str = "A";
    pub const NEW_ORDER_SINGLE: &str = "D";
    pub const ORDER_CANCEL_REQUEST: &str = "F";
    pub const ORDER_CANCEL_REPLACE_REQUEST: &str = "G";
    pub const BUSINESS_MESSAGE_REJECT: &str = "j";
    pub const MARKET_DATA_REQUEST: &str = "V";
    pub const MARKET_DATA_SNAPSHOT: &str = "W";
    pub const MARKET_DATA_INCREMENTAL: &str = "X";
    pub const MARKET_DATA_REQUEST_REJECT: &str = "Y";
    pub const REQUEST_FOR_POSITIONS: &str = "AN";
    pub const REQUEST_FOR_POSITIONS_ACK: &str = "AO";
    pub const POSITION_REPORT: &str = "AP";

    /// Session-level messages: never resent, gap-filled instead.
    pub fn is_admin(msg_type: &str) -> bool {
        matches!(msg_type, "0" | "1" | "2" | "3" | "4" | "5" | "A")
    }
}
