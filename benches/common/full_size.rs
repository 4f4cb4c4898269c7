//! The committed full-size graphs' JSON, decompressed (shared by
//! `benches/hf_model.rs` and `benches/autoshard.rs`; the decompression is
//! outside their timings).

use std::io::Read;

fn gunzip(gz: &[u8]) -> String {
    let mut text = String::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_string(&mut text)
        .expect("the committed graph decompresses");
    text
}

/// Llama-2-7B: 32 layers, 2,355 ATen ops.
#[allow(dead_code)]
pub fn llama_2_7b() -> String {
    gunzip(include_bytes!(
        "../../spmd-graph/graphs/hf/llama-2-7b.json.gz"
    ))
}

/// DeepSeek-V3 (671B): 61 layers, 58 of them MoE with 256 experts, in
/// `spmd.torch.moe`'s dispatch form; 10,459 ATen ops.
#[allow(dead_code)]
pub fn deepseek_v3_671b() -> String {
    gunzip(include_bytes!(
        "../../spmd-graph/graphs/hf/deepseek-v3-671b.json.gz"
    ))
}
