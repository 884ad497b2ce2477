//! Integration tests of bourse-journal, in one binary to keep the build short.
//!
//! Most tests run on tmpfs (`/dev/shm`) when it exists: they check logic, and an
//! fdatasync there is free. The group-commit test runs on the real disk, where slow
//! fsyncs are what makes groups form.

mod common;
mod corruption;
mod crash;
mod group_commit;
mod prop_model;
mod purge;
mod roundtrip;
mod snapshots;
