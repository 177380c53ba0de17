//! Media the model reads with `fs_read` (tools guide "Media files", §5.18 `multimodal`): when
//! the file's modality is enabled and the file is within `limits.max_<kind>_size_bytes`, the
//! next request carries a native block (`image_url`, `input_audio`, `video_url`) beside the
//! call's tool result. The block is ephemeral: the `adf_loop` row keeps `fs_read`'s metadata
//! (`content: null`) and the bytes are sent with that one request only.

use std::collections::HashMap;

use adf_providers::{ContentBlock, InputAudio, MediaUrl, Message, ToolResultContent};
use adf_store::{AdfFile, StoreError};
use base64::Engine as _;
use serde_json::Value;

use crate::prompt;

/// The native block for the file an `fs_read` call named, or `None` when it is not media, its
/// modality is off or it is over its size limit (then the model has the metadata only).
pub(super) fn block_for_read(
    file: &AdfFile,
    config: &Value,
    input: &Value,
) -> Result<Option<ContentBlock>, StoreError> {
    let Some(path) = input.get("path").and_then(Value::as_str) else {
        return Ok(None);
    };
    let Some(entry) = file.file_read(path)? else {
        return Ok(None);
    };
    let mime = entry.info.mime_type.as_deref().unwrap_or("");
    // Defaults of missing-tables §5.7 (`limits`).
    let (kind, default_limit) = match mime.split('/').next() {
        Some("image") => ("image", 5_242_880),
        Some("audio") => ("audio", 10_485_760),
        Some("video") => ("video", 20_971_520),
        _ => return Ok(None),
    };
    if !prompt::modality_enabled(config, kind) {
        return Ok(None);
    }
    let limit = config
        .pointer(&format!("/limits/max_{kind}_size_bytes"))
        .and_then(Value::as_u64)
        .unwrap_or(default_limit);
    if entry.content.len() as u64 > limit {
        return Ok(None);
    }
    let data = base64::engine::general_purpose::STANDARD.encode(&entry.content);
    Ok(Some(match kind {
        "image" => ContentBlock::ImageUrl {
            image_url: MediaUrl {
                url: format!("data:{mime};base64,{data}"),
            },
        },
        "video" => ContentBlock::VideoUrl {
            video_url: MediaUrl {
                url: format!("data:{mime};base64,{data}"),
            },
        },
        _ => ContentBlock::InputAudio {
            input_audio: InputAudio {
                data,
                format: audio_format(mime).to_owned(),
            },
        },
    }))
}

/// The `input_audio` format name of an audio MIME type.
fn audio_format(mime: &str) -> &str {
    match mime.split('/').nth(1).unwrap_or("") {
        "mpeg" | "mp3" => "mp3",
        "wav" | "x-wav" | "wave" => "wav",
        other => other,
    }
}

/// Adds each pending media block to its call's tool result in `messages`, then forgets them
/// all: they go with this one request.
pub(super) fn attach(messages: &mut [Message], media: &mut HashMap<String, Vec<ContentBlock>>) {
    if media.is_empty() {
        return;
    }
    for block in messages.iter_mut().flat_map(|m| m.content.iter_mut()) {
        if let ContentBlock::ToolResult {
            tool_use_id,
            content,
            ..
        } = block
            && let Some(extra) = media.remove(tool_use_id.as_str())
        {
            let mut blocks = match std::mem::take(content) {
                ToolResultContent::Text(text) => vec![ContentBlock::text(text)],
                ToolResultContent::Blocks(blocks) => blocks,
            };
            blocks.extend(extra);
            *content = ToolResultContent::Blocks(blocks);
        }
    }
    media.clear();
}
