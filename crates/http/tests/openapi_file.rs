//! The browser UI's TypeScript types are generated from `web/openapi.json`, a copy of
//! the document this crate generates. This test keeps the copy equal to the code:
//! after an API change it fails; `BOURSE_BLESS=1 cargo test -p bourse-http --test
//! openapi_file` writes the new copy (then rebuild the UI: `npm run build` in web/).

use utoipa::OpenApi;

#[test]
fn the_web_ui_types_come_from_the_current_document() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../web/openapi.json");
    let document = bourse_http::api::ApiDoc::openapi().to_pretty_json().expect("the document serializes") + "\n";
    if std::env::var_os("BOURSE_BLESS").is_some() {
        std::fs::write(&path, &document).expect("writing web/openapi.json");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == document,
        "web/openapi.json differs from the API's document: run BOURSE_BLESS=1 cargo test -p bourse-http --test \
         openapi_file, then npm run build in web/"
    );
}
