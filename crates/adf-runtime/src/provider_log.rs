//! The `provider_error` log rows of model requests (§6.2, STL-11), written alike by the
//! executor's turns and by code's `model_invoke`: a leaf both layers import.

use adf_providers::RetryNotice;
use adf_store::{AdfFile, NewLog, StoreError};
use serde_json::json;

/// Writes the retries one model request scheduled as `provider_error` warnings (§6.2,
/// STL-11; origin `executor`, the §13.5 table's): the turns' requests and code's
/// `model_invoke` alike. `loop_name` is the loop the request was for (`None` or `main`: no
/// loop column).
pub(crate) fn log_retries(
    file: &mut AdfFile,
    loop_name: Option<&str>,
    notices: &[RetryNotice],
) -> Result<(), StoreError> {
    let loop_name = loop_name.filter(|name| *name != "main");
    for notice in notices {
        file.log(&NewLog {
            level: "warn",
            origin: Some("executor"),
            event: Some("provider_error"),
            target: Some(&notice.provider),
            message: &format!(
                "attempt {}/{} failed ({}), retrying in {} ms: {}",
                notice.attempt,
                notice.max_attempts,
                notice.reason,
                notice.delay.as_millis(),
                notice.error
            ),
            data: Some(&json!({ "attempt": notice.attempt, "max_attempts": notice.max_attempts, "delay_ms": notice.delay.as_millis() as u64, "status": notice.error.status(), "reason": notice.reason })),
            r#loop: loop_name,
        })?;
    }
    Ok(())
}
