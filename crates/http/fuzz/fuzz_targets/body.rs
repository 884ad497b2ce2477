//! The REST and WebSocket request bodies on arbitrary bytes: every route's JSON body,
//! the WebSocket request and the query parameters read by the routes' extractors and
//! converted to commands, day-trading calls and subscriptions; a bad one is a typed 400
//! (or 404 for an unknown name), never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    bourse_http::fuzzing::request_body(data);
});
