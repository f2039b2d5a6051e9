//! KV bytes of one token from a model's Hugging Face `config.json`, since KV tiers and
//! transfers are sized in bytes.
//!
//! The count is the one a paged KV cache keeps per token, over the layers that keep one:
//!
//! - attention with grouped KV heads: `2 (keys and values) × layers × num_key_value_heads ×
//!   head_dim × dtype bytes`, with `num_key_value_heads` defaulting to
//!   `num_attention_heads` and `head_dim` to `hidden_size / num_attention_heads`;
//! - multi-head latent attention (a `kv_lora_rank`, as DeepSeek's): one latent per layer,
//!   `layers × (kv_lora_rank + qk_rope_head_dim) × dtype bytes`, as vLLM caches it;
//! - hybrid models listing `layer_types`: only the attention layers (`full_attention`,
//!   `sliding_attention`, `chunked_attention`, `attention`) count; linear-attention and
//!   state-space layers keep a state of fixed size, not a per-token cache.
//!
//! A multimodal config's `text_config` holds the language model's keys. The KV cache's
//! data type is the model's (`torch_dtype`, or `dtype`) unless one is given, as vLLM's
//! `--kv-cache-dtype auto`. Left out: a sliding window's cap on what its layers keep, and
//! the extra per-token indexer cache of DeepSeek's sparse attention.

use serde_json::{Map, Value};

/// The largest model config read (real ones are a few kilobytes).
pub const MAX_MODEL_CONFIG_BYTES: u64 = 4 << 20;

/// The text of the model config at `path`, at most [`MAX_MODEL_CONFIG_BYTES`]; the error
/// names the file.
pub fn read_model_config(path: &std::path::Path) -> Result<String, String> {
    let fail = |why: String| format!("{}: {why}", path.display());
    let file =
        std::fs::File::open(path).map_err(|e| fail(format!("cannot read model config: {e}")))?;
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(file, MAX_MODEL_CONFIG_BYTES + 1),
        &mut text,
    )
    .map_err(|e| fail(format!("cannot read model config: {e}")))?;
    if text.len() as u64 > MAX_MODEL_CONFIG_BYTES {
        return Err(fail(format!(
            "a model config is at most {MAX_MODEL_CONFIG_BYTES} bytes"
        )));
    }
    Ok(text)
}

/// Why a model config gives no KV size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelConfigError {
    /// Not a JSON object.
    #[error("not a model config (a JSON object): {0}")]
    Json(String),
    /// A key the size needs is missing, or not a positive whole number.
    #[error("field `{field}`: {why}")]
    Field {
        /// The key (under `text_config.` when read there).
        field: String,
        /// What is wrong with it.
        why: String,
    },
    /// A KV data type this does not know the size of.
    #[error(
        "KV cache dtype `{0}` is not one of bfloat16, float16, float32, fp8 (or their aliases)"
    )]
    Dtype(String),
    /// The product is out of range.
    #[error("the KV bytes of one token come to more than 2^30")]
    TooLarge,
    /// What is not KV cache takes all the memory vLLM may use.
    #[error(
        "the model does not fit: {:.2} GiB of the GPU may be used, {:.2} GiB of it is not KV cache",
        *requested_mib as f64 / 1024.0,
        *non_kv_mib as f64 / 1024.0
    )]
    DoesNotFit {
        /// The memory vLLM may use, MiB.
        requested_mib: u64,
        /// Weights, activations and the rest, MiB.
        non_kv_mib: u64,
    },
}

/// A model's KV cache per token, and what it was worked out from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelKv {
    /// KV bytes of one token, every layer.
    pub bytes_per_token: u64,
    /// Layers that keep a per-token cache.
    pub kv_layers: u64,
    /// Elements each of those layers keeps per token.
    pub elements_per_layer: u64,
    /// Bytes of one element.
    pub dtype_bytes: u64,
}

/// Bytes of one element of the KV data type `name` (`auto` is not a size).
pub fn dtype_bytes(name: &str) -> Result<u64, ModelConfigError> {
    match name.to_ascii_lowercase().as_str() {
        "bfloat16" | "bf16" | "float16" | "fp16" | "half" => Ok(2),
        "float32" | "fp32" | "float" => Ok(4),
        "fp8" | "fp8_e4m3" | "fp8_e5m2" | "float8_e4m3fn" | "float8_e5m2" | "int8" => Ok(1),
        _ => Err(ModelConfigError::Dtype(name.to_owned())),
    }
}

/// The KV size per token of the model config `text`, with the KV data type `kv_dtype`
/// (`None` or `auto`: the model's).
pub fn kv_from_model_config(
    text: &str,
    kv_dtype: Option<&str>,
) -> Result<ModelKv, ModelConfigError> {
    let root: Value =
        serde_json::from_str(text).map_err(|e| ModelConfigError::Json(e.to_string()))?;
    let Value::Object(root) = root else {
        return Err(ModelConfigError::Json(
            "the top level is not an object".into(),
        ));
    };
    let (keys, prefix) = match root.get("text_config") {
        Some(Value::Object(text)) => (text, "text_config."),
        _ => (&root, ""),
    };
    let field = |name: &str, why: &str| ModelConfigError::Field {
        field: format!("{prefix}{name}"),
        why: why.to_owned(),
    };
    let number = |name: &str| -> Result<Option<u64>, ModelConfigError> {
        match keys.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => match value.as_u64() {
                Some(n) if n > 0 => Ok(Some(n)),
                _ => Err(field(
                    name,
                    &format!("must be a positive whole number, not {value}"),
                )),
            },
        }
    };
    let required = |name: &str| number(name)?.ok_or_else(|| field(name, "missing"));
    let dtype = match kv_dtype.filter(|d| !d.eq_ignore_ascii_case("auto")) {
        Some(given) => dtype_bytes(given)?,
        None => {
            let named = [keys, &root]
                .iter()
                .find_map(|m| text_of(m, "torch_dtype").or_else(|| text_of(m, "dtype")));
            match named {
                Some(name) => dtype_bytes(name)?,
                None => {
                    return Err(field(
                        "torch_dtype",
                        "missing (nor `dtype`): give the KV cache's data type",
                    ));
                }
            }
        }
    };
    let layers = required("num_hidden_layers")?;
    let kv_layers = match keys.get("layer_types") {
        Some(Value::Array(types)) => types
            .iter()
            .filter(|t| {
                matches!(
                    t.as_str(),
                    Some(
                        "full_attention" | "sliding_attention" | "chunked_attention" | "attention"
                    )
                )
            })
            .count() as u64,
        _ => layers,
    };
    let elements_per_layer = if let Some(rank) = number("kv_lora_rank")? {
        rank.checked_add(required("qk_rope_head_dim")?)
            .ok_or(ModelConfigError::TooLarge)?
    } else {
        let heads = number("num_attention_heads")?;
        let kv_heads = match number("num_key_value_heads")? {
            Some(n) => n,
            None => heads.ok_or_else(|| {
                field("num_key_value_heads", "missing (nor `num_attention_heads`)")
            })?,
        };
        let head_dim = match number("head_dim")? {
            Some(d) => d,
            None => {
                let hidden = required("hidden_size")?;
                let heads = heads.ok_or_else(|| field("num_attention_heads", "missing"))?;
                if hidden % heads != 0 {
                    return Err(field(
                        "hidden_size",
                        &format!(
                            "{hidden} is not a multiple of num_attention_heads {heads}; give `head_dim`"
                        ),
                    ));
                }
                hidden / heads
            }
        };
        2u64.checked_mul(kv_heads)
            .and_then(|n| n.checked_mul(head_dim))
            .ok_or(ModelConfigError::TooLarge)?
    };
    let bytes_per_token = kv_layers
        .checked_mul(elements_per_layer)
        .and_then(|n| n.checked_mul(dtype))
        .filter(|b| *b <= 1 << 30)
        .ok_or(ModelConfigError::TooLarge)?;
    if bytes_per_token == 0 {
        return Err(field(
            "layer_types",
            "names no attention layer: no per-token KV cache",
        ));
    }
    Ok(ModelKv {
        bytes_per_token,
        kv_layers,
        elements_per_layer,
        dtype_bytes: dtype,
    })
}

fn text_of<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    map.get(key).and_then(Value::as_str)
}

/// A config's keys (the top level's, or a multimodal config's `text_config`), read as
/// whole numbers; errors name the key with its place.
pub(crate) struct Keys<'a> {
    pub(crate) keys: &'a Map<String, Value>,
    pub(crate) prefix: &'static str,
}

impl Keys<'_> {
    pub(crate) fn field(&self, name: &str, why: &str) -> ModelConfigError {
        ModelConfigError::Field {
            field: format!("{}{name}", self.prefix),
            why: why.to_owned(),
        }
    }

    pub(crate) fn number(&self, name: &str) -> Result<Option<u64>, ModelConfigError> {
        match self.keys.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => value.as_u64().filter(|n| *n > 0).map(Some).ok_or_else(|| {
                self.field(
                    name,
                    &format!("must be a positive whole number, not {value}"),
                )
            }),
        }
    }

    pub(crate) fn required(&self, name: &str) -> Result<u64, ModelConfigError> {
        self.number(name)?
            .ok_or_else(|| self.field(name, "missing"))
    }

    pub(crate) fn first(&self, names: &[&str]) -> Result<Option<u64>, ModelConfigError> {
        for name in names {
            if let Some(n) = self.number(name)? {
                return Ok(Some(n));
            }
        }
        Ok(None)
    }
}

/// The config `text`'s top-level object.
pub(crate) fn object(text: &str) -> Result<Map<String, Value>, ModelConfigError> {
    match serde_json::from_str(text).map_err(|e| ModelConfigError::Json(e.to_string()))? {
        Value::Object(root) => Ok(root),
        _ => Err(ModelConfigError::Json(
            "the top level is not an object".into(),
        )),
    }
}

/// The language model's keys: a multimodal config's `text_config`, else the top level.
pub(crate) fn language_keys(root: &Map<String, Value>) -> Keys<'_> {
    match root.get("text_config") {
        Some(Value::Object(text)) => Keys {
            keys: text,
            prefix: "text_config.",
        },
        _ => Keys {
            keys: root,
            prefix: "",
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouped_heads_count_keys_and_values_of_every_layer() {
        // Llama-3.1-8B's shape: 32 layers, 8 KV heads of 4096 / 32 = 128, bf16.
        let llama = r#"{"num_hidden_layers": 32, "num_attention_heads": 32,
            "num_key_value_heads": 8, "hidden_size": 4096, "torch_dtype": "bfloat16"}"#;
        let kv = kv_from_model_config(llama, None).unwrap();
        assert_eq!(kv.bytes_per_token, 131_072);
        assert_eq!(
            kv_from_model_config(llama, Some("fp8"))
                .unwrap()
                .bytes_per_token,
            65_536
        );
        assert_eq!(kv_from_model_config(llama, Some("auto")).unwrap(), kv);
        // Without KV heads, every attention head keeps its own.
        let mha = r#"{"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64,
            "dtype": "float32"}"#;
        assert_eq!(
            kv_from_model_config(mha, None).unwrap().bytes_per_token,
            2 * 2 * 4 * 16 * 4
        );
    }

    /// The model configs in `traces/models/`, as their publishers released them.
    fn bytes_of(name: &str, dtype: Option<&str>) -> u64 {
        let path = format!("{}/../../traces/models/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap();
        kv_from_model_config(&text, dtype).unwrap().bytes_per_token
    }

    #[test]
    fn published_configs_give_their_kv_bytes() {
        // 2 × 32 layers × 8 KV heads × 128 (4096 / 32) × 2 bytes.
        assert_eq!(bytes_of("Llama-3.1-8B.json", None), 131_072);
        // Qwen3-32B's `head_dim` 128 wins over 5120 / 64 = 80: 2 × 64 × 8 × 128 × 2.
        assert_eq!(bytes_of("Qwen3-32B.json", None), 262_144);
        // Latent attention: 16 layers × (512 + 64) × 2 bytes; fp8 halves it.
        assert_eq!(bytes_of("DeepSeek-V3.2-Exp-16L64E.json", None), 18_432);
        assert_eq!(
            bytes_of("DeepSeek-V3.2-Exp-16L64E.json", Some("fp8")),
            9_216
        );
        // Hybrid: 16 of the 64 layers are full attention: 2 × 16 × 4 × 256 × 2.
        assert_eq!(bytes_of("Qwen3.8-27B.json", None), 65_536);
    }

    #[test]
    fn bad_configs_name_the_field() {
        let err = |text: &str| kv_from_model_config(text, None).unwrap_err().to_string();
        assert_eq!(
            err("[1]"),
            "not a model config (a JSON object): the top level is not an object"
        );
        assert_eq!(
            err(r#"{"torch_dtype": "bfloat16", "num_attention_heads": 8}"#),
            "field `num_hidden_layers`: missing"
        );
        assert_eq!(
            err(r#"{"text_config": {"num_hidden_layers": -1}, "torch_dtype": "bfloat16"}"#),
            "field `text_config.num_hidden_layers`: must be a positive whole number, not -1"
        );
        assert!(err(r#"{"num_hidden_layers": 2}"#).starts_with("field `torch_dtype`: missing"));
        assert!(err(r#"{"num_hidden_layers": 2, "torch_dtype": "int4"}"#).contains("`int4`"));
        assert_eq!(
            err(
                r#"{"num_hidden_layers": 4294967296, "num_key_value_heads": 4294967296,
                "head_dim": 4294967296, "torch_dtype": "float32"}"#
            ),
            "the KV bytes of one token come to more than 2^30"
        );
    }
}
