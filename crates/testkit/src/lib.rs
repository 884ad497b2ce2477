//! # bourse-testkit
//!
//! What every crate's `tests/fuzz_corpus.rs` shares (a dev-dependency only): the files
//! of a fuzz target's corpus, read in a stable order ([`corpus`]), and [`SplitMix64`],
//! the seeded generator of their random inputs, so a failure reproduces from the seed
//! the test printed.

use std::path::Path;

/// Every file of `crate_dir/fuzz/corpus/target` (pass `env!("CARGO_MANIFEST_DIR")`) as
/// (path, bytes), sorted by path; panics, naming the directory, when it cannot be read
/// or holds fewer than `min_files` files (a corpus that went missing is a failure).
pub fn corpus(crate_dir: &str, target: &str, min_files: usize) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(crate_dir).join("fuzz/corpus").join(target);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap_or_else(|e| panic!("{}: {e}", dir.display())).path();
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path.display().to_string(), bytes)
        })
        .collect();
    files.sort();
    assert!(files.len() >= min_files, "the {target} corpus ({}) has {} files", dir.display(), files.len());
    files
}

/// SplitMix64 (Steele, Lea and Flood): small, fast, and the same sequence for the same
/// seed on every machine.
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next number. (Not `Iterator::next`: the sequence never ends, and an
    /// `Option` at every call site would be noise.)
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (which must not be 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// One of `items` (which must not be empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sequence_is_splitmix64s() {
        // The reference outputs for seed 0 (Vigna's splitmix64.c).
        let mut rng = SplitMix64(0);
        assert_eq!(rng.next(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(rng.next(), 0x6E78_9E6A_A1B9_65F4);
        let picked = *SplitMix64(7).pick(&[1, 2, 3]);
        assert!([1, 2, 3].contains(&picked));
    }
}
