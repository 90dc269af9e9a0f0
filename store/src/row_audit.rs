//! `audit verify` for a stored projection of at most one row per event, keyed by the event's
//! position (the presence and price histories): the log is folded up to the projection's
//! checkpoint a page at a time and each page's expected rows are compared with the rows stored
//! at the same positions, so memory holds one page; rows past the last event compared are
//! strays. Rows are compared as text, the form a finding shows them in.

use std::future::Future;

use crate::audit::{AuditFinding, AuditReport, Findings};
use crate::{RecordedEvent, Store, StoreError};

/// A row as compared: its position and its text.
pub(crate) type RowText = (u64, String);

/// What one projection's check found: the checkpoint it compared up to, and how many stored rows
/// it compared (0 when the checkpoint moved meanwhile: the rows were ahead of the replay, so
/// nothing was reported; run it again, or with the server stopped).
pub(crate) struct RowsChecked {
    pub checkpoint: u64,
    pub checked: u64,
}

/// Compares the rows of projection `name` with the log. `expected` gives the row an event
/// makes, if any (an event that does not decode makes none: the log's part of the audit reports
/// it); `stored` reads the rows with positions in `(after, through]`, in position order;
/// `finding` describes a row that differs or is on one side only.
pub(crate) async fn verify_rows<S, Fut>(
    store: &Store,
    name: &str,
    expected: impl Fn(&RecordedEvent) -> Option<RowText>,
    stored: S,
    finding: impl Fn(u64, Option<String>, Option<String>) -> AuditFinding,
    report: &mut AuditReport,
) -> Result<RowsChecked, StoreError>
where
    S: Fn(u64, u64) -> Fut,
    Fut: Future<Output = Result<Vec<RowText>, StoreError>>,
{
    let checkpoint = store.consumer_checkpoint(name).await?;
    let mut found = Vec::new();
    let mut checked = 0;
    let mut after = 0;
    while after < checkpoint {
        let events = store.log_page_through(after, checkpoint).await?;
        let Some(last) = events.last().map(|e| e.position) else {
            break;
        };
        let replayed: Vec<RowText> = events.iter().filter_map(&expected).collect();
        let rows = stored(after, last).await?;
        compare(&replayed, &rows, &finding, &mut found);
        checked += rows.len() as u64;
        after = last;
    }
    // Rows past what was compared (past the checkpoint, or past the log's end if the checkpoint
    // is ahead of it) have no event to come from.
    let strays = stored(after, u64::MAX >> 1).await?;
    compare(&[], &strays, &finding, &mut found);
    checked += strays.len() as u64;
    if store.consumer_checkpoint(name).await? != checkpoint {
        // Another runner moved it meanwhile: the rows are ahead of the replay.
        return Ok(RowsChecked {
            checkpoint,
            checked: 0,
        });
    }
    let mut findings = Findings {
        kept: std::mem::take(&mut report.findings),
        omitted: report.findings_omitted,
    };
    for one in found {
        findings.push(one);
    }
    report.findings = findings.kept;
    report.findings_omitted = findings.omitted;
    Ok(RowsChecked {
        checkpoint,
        checked,
    })
}

/// Compares a page's expected rows with the rows stored for the same positions (both in
/// position order), pushing a finding for each that differs or is on one side only.
fn compare(
    expected: &[RowText],
    stored: &[RowText],
    finding: &impl Fn(u64, Option<String>, Option<String>) -> AuditFinding,
    found: &mut Vec<AuditFinding>,
) {
    let mut expected = expected.iter().peekable();
    let mut stored = stored.iter().peekable();
    loop {
        let (want, have) = match (expected.peek(), stored.peek()) {
            (None, None) => return,
            (Some(e), Some(s)) if e.0 == s.0 => (expected.next(), stored.next()),
            (Some(e), Some(s)) if e.0 < s.0 => (expected.next(), None),
            (Some(_), None) => (expected.next(), None),
            _ => (None, stored.next()),
        };
        let position = want.or(have).map_or(0, |row| row.0);
        let want = want.map(|row| row.1.clone());
        let have = have.map(|row| row.1.clone());
        if want != have {
            found.push(finding(position, have, want));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mismatch(position: u64, stored: Option<String>, replayed: Option<String>) -> AuditFinding {
        AuditFinding::PresenceMismatch {
            position,
            stored,
            replayed,
        }
    }

    fn rows(list: &[(u64, &str)]) -> Vec<RowText> {
        list.iter().map(|(p, t)| (*p, (*t).to_owned())).collect()
    }

    #[test]
    fn finds_changed_missing_and_stray_rows_by_position() {
        let expected = rows(&[(1, "a"), (3, "c"), (5, "e")]);
        let stored = rows(&[(1, "a"), (3, "C"), (4, "d"), (6, "f")]);
        let mut found = Vec::new();
        compare(&expected, &stored, &mismatch, &mut found);
        let text = |s: &str| Some(s.to_owned());
        assert_eq!(
            found,
            vec![
                mismatch(3, text("C"), text("c")),
                mismatch(4, text("d"), None),
                mismatch(5, None, text("e")),
                mismatch(6, text("f"), None),
            ]
        );
        found.clear();
        compare(&expected, &expected, &mismatch, &mut found);
        assert!(found.is_empty());
    }
}
