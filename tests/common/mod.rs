//! Shared by the root crate's sweep tests (`robustness.rs`, `fixed_point.rs`).

/// xorshift64*: small, deterministic, good enough to pick mutations and
/// layouts from a fixed seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform-ish in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// A random valid mapping of rank `rank` on a mesh of `mesh_rank` dims (each
/// dim replicated or on a mesh dim of its own), and the mesh dims it leaves
/// free (for a partial status).
pub fn random_mapping(
    rng: &mut Rng,
    rank: usize,
    mesh_rank: usize,
) -> (Vec<spmd_core::Sharding>, Vec<u8>) {
    let mut free: Vec<u8> = (0..mesh_rank as u8).collect();
    let mapping = (0..rank)
        .map(|_| {
            if free.is_empty() || rng.below(2) == 0 {
                spmd_core::Sharding::REPLICATED
            } else {
                spmd_core::Sharding::on(free.swap_remove(rng.below(free.len())))
            }
        })
        .collect();
    (mapping, free)
}

/// The frame of a synthetic call of a registered op: a random mesh (1 to 3
/// dims of 1 to 4 devices), one rank for every tensor (0 to 4), and the
/// number of inputs (declared, or 1 to 3 for variadic ops) and outputs.
pub fn call_frame(rng: &mut Rng, info: &spmd_core::RuleInfo) -> (Vec<usize>, usize, usize, usize) {
    let mesh: Vec<usize> = (0..1 + rng.below(3)).map(|_| 1 + rng.below(4)).collect();
    let rank = rng.below(5);
    let n_in = if info.inputs.is_empty() {
        1 + rng.below(3)
    } else {
        info.inputs.len()
    };
    (mesh, rank, n_in, info.outputs.len().max(1))
}

/// The cases of one vector file of `tests/conformance/`.
pub fn load(file: &str) -> Vec<spmd_conformance::Case> {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/conformance")
        .join(file);
    let text = std::fs::read_to_string(&path).expect("the vectors are in the repository");
    spmd_conformance::parse_cases(&text).expect("the vectors parse")
}
