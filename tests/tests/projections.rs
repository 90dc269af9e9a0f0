//! Projections and audit on both databases: crash safety, rebuild-and-swap, tamper evidence.

use gpunex_domain::Account;
use gpunex_store::{AuditFinding, AuditReport, ExpectedVersion, Store};
use gpunex_tests::{TestDb, conformance, credits, provider, seed_credits, stream};

conformance!(
    earnings_figures_equal_the_line_by_line_split,
    a_reader_far_behind_reads_many_hours_from_their_lines,
    earnings_lines_are_stored_read_as_of_a_position_and_audited,
    earnings_reads_cross_many_runs,
    rentals_are_stored_paged_and_audited,
    small_pages_fold_as_one_page,
    payouts_are_stored_paged_and_audited,
    runner_folds_every_event_once,
    failure_mid_batch_neither_loses_nor_doubles,
    rebuild_swaps_in_fresh_tables_and_repairs_drift,
    competing_runners_do_not_double_count,
    concurrent_rebuilds_never_mix_their_rows,
    subscriptions_stop_at_a_gap_without_skipping,
    audit_reports_an_undecodable_event_past_the_checkpoint,
    audit_reports_edited_rows,
    audit_reports_deleted_rows,
    audit_reports_reordered_rows,
    audit_reports_a_truncated_tail,
    events_are_immutable_to_ordinary_sql,
    a_rebuild_leaves_its_tables_vacuumed_and_analyzed,
    statements_page_through_many_postings_rows,
    a_journal_of_one_row_per_posting_is_dropped_and_refolded,
    a_journal_of_one_row_per_entry_is_dropped_and_refolded,
    earnings_lines_of_one_row_each_are_dropped_and_refolded,
    earnings_hours_of_one_row_per_gpu_are_dropped_and_refolded,
);

async fn audit(store: &Store) -> AuditReport {
    store.audit(&|_| {}).await.unwrap()
}

/// A rental of two GPUs for `provider`, and `count` usage lines of it: line `i` covers 10
/// GPU-seconds, grosses `1_000 + i` micro-USDC (20% fee) and is metered at `at(i)`.
fn usage_events(
    provider_id: uuid::Uuid,
    count: u64,
    at: impl Fn(u64) -> i64,
) -> (uuid::Uuid, Vec<gpunex_store::NewEvent>) {
    usage_events_of(provider_id, &["GPU-a", "GPU-b"], "h100-80gb", count, at)
}

/// A rental of `gpus` under `model` and `count` usage lines: line `i` charges 1,000 + i (a fifth
/// of it the fee) for 10 GPU-seconds, dated `at(i)`.
fn usage_events_of(
    provider_id: uuid::Uuid,
    gpus: &[&str],
    model: &str,
    count: u64,
    at: impl Fn(u64) -> i64,
) -> (uuid::Uuid, Vec<gpunex_store::NewEvent>) {
    use gpunex_domain::DomainEvent;
    use gpunex_domain::ledger::{JournalEntry, Posting};
    use gpunex_domain::money::Usdc;
    use gpunex_domain::rental::{RentalEvent, RentalStarted, UsageMetered};
    use gpunex_domain::time::Timestamp;
    let rental = RentalStarted {
        rental_id: uuid::Uuid::now_v7(),
        renter_id: provider(900),
        provider_id,
        machine_id: uuid::Uuid::now_v7(),
        gpu_uuids: gpus.iter().map(|g| (*g).to_owned()).collect(),
        model_id: model.to_owned(),
        price_per_gpu_hour: Usdc::from_micros(2_000_000),
        started_at: Timestamp::from_unix_micros(at(0)),
        workload: None,
    };
    let mut events = vec![gpunex_tests::new_event(&DomainEvent::Rental(
        RentalEvent::Started(rental.clone()),
    ))];
    for i in 0..count {
        let gross = 1_000 + i64::try_from(i).unwrap();
        let fee = gross / 5;
        let postings = JournalEntry::new(vec![
            Posting::debit(
                Account::RenterReceivable(rental.renter_id),
                Usdc::from_micros(gross),
            ),
            Posting::credit(
                Account::ProviderPayable(provider_id),
                Usdc::from_micros(gross - fee),
            ),
            Posting::credit(Account::PlatformRevenue, Usdc::from_micros(fee)),
        ])
        .unwrap();
        events.push(gpunex_tests::new_event(&DomainEvent::Rental(
            RentalEvent::UsageMetered(UsageMetered {
                entry_id: uuid::Uuid::now_v7(),
                rental_id: rental.rental_id,
                renter_id: rental.renter_id,
                provider_id,
                report_id: uuid::Uuid::now_v7(),
                from_gpu_seconds: i * 10,
                to_gpu_seconds: (i + 1) * 10,
                price_per_gpu_hour: rental.price_per_gpu_hour,
                gross: Usdc::from_micros(gross),
                fee: Usdc::from_micros(fee),
                net: Usdc::from_micros(gross - fee),
                fee_bp: 2_000,
                postings,
                reported_gpu_seconds: None,
                metered_at: Some(Timestamp::from_unix_micros(at(i))),
            }),
        )));
    }
    (rental.rental_id, events)
}

/// Appends each rental stream's events in turns of 5 events per stream, so that pages mix them;
/// returns each stream's version.
async fn append_in_turns(
    store: &Store,
    streams: &mut [(uuid::Uuid, Vec<gpunex_store::NewEvent>)],
) -> Vec<u64> {
    let mut versions = vec![0_u64; streams.len()];
    while streams.iter().any(|(_, events)| !events.is_empty()) {
        for (n, (rental_id, events)) in streams.iter_mut().enumerate() {
            let turn: Vec<_> = events.drain(..events.len().min(5)).collect();
            if turn.is_empty() {
                continue;
            }
            let expected = match versions[n] {
                0 => ExpectedVersion::NoStream,
                v => ExpectedVersion::Exact(v),
            };
            versions[n] += turn.len() as u64;
            store
                .append(stream(&format!("rental-{rental_id}")), expected, turn)
                .await
                .unwrap();
        }
    }
    versions
}

/// The earnings and rentals projections fold each page while the page before it is committed,
/// handing that page's rentals and provider cursors over in memory. With pages of 7 events, a
/// rental starts in one page and is metered in the next ones, providers' running sums cross
/// every page, and a rental ends pages after it started; the live catch-up and the rebuild (on
/// SQLite, through the rebuild's own connection) both store exactly the fold of the whole log.
async fn small_pages_fold_as_one_page(db: &TestDb) {
    use gpunex_domain::DomainEvent;
    use gpunex_domain::rental::{EndCause, RentalEnded, RentalEvent};
    use gpunex_domain::time::Timestamp;
    let store = Store::open(
        &db.url,
        &gpunex_store::StoreOptions {
            fold_page_events: 7,
            ..gpunex_store::StoreOptions::default()
        },
    )
    .await
    .unwrap();
    const SECOND: i64 = 1_000_000;
    let t0 = 1_790_000_000 * SECOND;
    let (a, b) = (provider(1), provider(2));
    let mut rentals = Vec::new();
    // Two rentals of a and one of b, appended in turns of 5 events, so pages mix them.
    let mut streams: Vec<_> = [(a, 40), (b, 33), (a, 21)]
        .into_iter()
        .map(|(provider_id, lines)| {
            usage_events(provider_id, lines, |i| {
                t0 + SECOND * i64::try_from(i).unwrap()
            })
        })
        .collect();
    let versions = append_in_turns(&store, &mut streams).await;
    for (rental_id, _) in &streams {
        rentals.push(*rental_id);
    }
    let ended = RentalEvent::Ended(RentalEnded {
        rental_id: rentals[1],
        cause: EndCause::RenterCancelled,
        ended_at: Timestamp::from_unix_micros(t0 + 40 * SECOND),
        ended_by: "test".to_owned(),
        evidence: String::new(),
    });
    store
        .append(
            stream(&format!("rental-{}", rentals[1])),
            ExpectedVersion::Exact(versions[1]),
            vec![gpunex_tests::new_event(&DomainEvent::Rental(ended))],
        )
        .await
        .unwrap();
    let head = store.head_position().await.unwrap();
    assert_eq!(head, 3 + 40 + 33 + 21 + 1);

    let live = store.catch_up_earnings().await.unwrap();
    assert_eq!((live.checkpoint, live.batches), (head, head.div_ceil(7)));
    assert_eq!(store.catch_up_rentals().await.unwrap().checkpoint, head);
    let expect = |report: &AuditReport| {
        assert!(report.is_clean(), "{:?}", report.findings);
        assert_eq!(report.earnings_lines_checked, 94);
        assert_eq!(report.rentals_checked, 3);
    };
    store.run_projections().await.unwrap();
    expect(&audit(&store).await);
    let all = (
        Timestamp::from_unix_micros(0),
        Timestamp::from_unix_micros(i64::MAX),
    );
    let sums = |lines: std::ops::Range<i64>| {
        let gross: i64 = lines.map(|i| 1_000 + i).sum();
        gross
    };
    let of_a = store.earnings_sums(a, all.0, all.1, head).await.unwrap();
    assert_eq!((of_a.lines, of_a.gross), (61, sums(0..40) + sums(0..21)));
    let of_b = store.earnings_sums(b, all.0, all.1, head).await.unwrap();
    assert_eq!((of_b.lines, of_b.gross), (33, sums(0..33)));

    // The rebuilds fold the same pages again into emptied tables.
    assert_eq!(store.rebuild_earnings().await.unwrap().checkpoint, head);
    assert_eq!(store.rebuild_rentals().await.unwrap().checkpoint, head);
    expect(&audit(&store).await);
    assert_eq!(
        store.earnings_sums(a, all.0, all.1, head).await.unwrap(),
        of_a
    );
    assert_eq!(
        store.earnings_sums(b, all.0, all.1, head).await.unwrap(),
        of_b
    );
}

/// The stored earnings projection folds lines across batches as the in-memory model would,
/// reads them as of a position, and `audit verify` catches an edited, a deleted or a stray line;
/// a rebuild repairs them.
async fn earnings_lines_are_stored_read_as_of_a_position_and_audited(db: &TestDb) {
    use gpunex_domain::time::Timestamp;
    use gpunex_store::earnings::LineRange;
    let store = db.open().await;
    let (a, b) = (provider(1), provider(2));
    const SECOND: i64 = 1_000_000;
    let t0 = 1_790_000_000 * SECOND;
    // Provider a: 1,500 lines a second apart, except line 700, metered "before" line 699 (another
    // server's clock), which takes line 699's date.
    let (rental_a, events_a) = usage_events(a, 1_500, |i| {
        t0 + SECOND * i64::try_from(if i == 700 { 500 } else { i }).unwrap()
    });
    let (_, events_b) = usage_events(b, 800, |i| t0 + 2 * SECOND * i64::try_from(i).unwrap());
    let first = store
        .append(
            stream(&format!("rental-{rental_a}")),
            ExpectedVersion::NoStream,
            events_a,
        )
        .await
        .unwrap();
    let middle = first.last_position();
    store
        .append(stream("rental-b"), ExpectedVersion::NoStream, events_b)
        .await
        .unwrap();
    // Nothing folded yet: a read as of the first append folds what it needs first.
    assert_eq!(store.earnings_checkpoint().await.unwrap(), 0);
    store.earnings_reached(middle).await.unwrap();
    assert!(store.earnings_checkpoint().await.unwrap() >= middle);
    store.run_projections().await.unwrap();
    let head = store.head_position().await.unwrap();
    assert_eq!(store.earnings_checkpoint().await.unwrap(), head);

    let all = (
        Timestamp::from_unix_micros(0),
        Timestamp::from_unix_micros(i64::MAX),
    );
    let sums = store.earnings_sums(a, all.0, all.1, head).await.unwrap();
    let gross: i64 = (0..1_500).map(|i| 1_000 + i).sum();
    let fee: i64 = (0..1_500).map(|i| (1_000 + i) / 5).sum();
    assert_eq!(
        (sums.lines, sums.gross, sums.fee, sums.net),
        (1_500, gross, fee, gross - fee)
    );
    assert_eq!(sums.gpu_seconds, 15_000);
    // Line 700 is dated at line 699's second: [699 s, 700 s) holds two lines.
    let at = |s: i64| Timestamp::from_unix_micros(t0 + s * SECOND);
    assert_eq!(
        store
            .earnings_sums(a, at(699), at(700), head)
            .await
            .unwrap()
            .lines,
        2
    );
    assert_eq!(
        store
            .earnings_sums(a, at(0), at(10), head)
            .await
            .unwrap()
            .lines,
        10
    );
    // As of the middle position, provider b has nothing yet; a has everything.
    assert_eq!(
        store
            .earnings_sums(b, all.0, all.1, middle)
            .await
            .unwrap()
            .lines,
        0
    );
    assert_eq!(
        store
            .earnings_sums(b, all.0, all.1, head)
            .await
            .unwrap()
            .lines,
        800
    );
    // Several providers at once (finance's view) equal one by one, a provider with no line
    // included, in the order asked; more providers than one statement takes.
    let many: Vec<uuid::Uuid> = [b, provider(77), a]
        .into_iter()
        .chain((100..330).map(provider))
        .collect();
    for (from, until, as_of) in [
        (all.0, all.1, head),
        (at(100), at(700), head),
        (all.0, all.1, middle),
        (at(10), at(10), head),
    ] {
        let together = store
            .earnings_sums_of(&many, from, until, as_of)
            .await
            .unwrap();
        assert_eq!(together.len(), many.len());
        for (provider_id, sums) in many.iter().zip(&together).take(4) {
            assert_eq!(
                *sums,
                store
                    .earnings_sums(*provider_id, from, until, as_of)
                    .await
                    .unwrap()
            );
        }
        assert!(together[3..].iter().all(|s| *s == Default::default()));
    }
    // Keyset pages: 1,500 lines in pages of 400, in date order, each naming its rental.
    let range = LineRange::Dated {
        from: all.0,
        until: all.1,
        as_of: head,
    };
    let mut lines = Vec::new();
    loop {
        let after = lines
            .last()
            .map_or(0, |l: &gpunex_projections::earnings::Line| l.position);
        let page = store.earnings_lines(a, range, after, 400).await.unwrap();
        let done = page.len() < 400;
        lines.extend(page);
        if done {
            break;
        }
    }
    assert_eq!(lines.len(), 1_500);
    assert!(
        lines
            .windows(2)
            .all(|w| w[0].at <= w[1].at && w[0].position < w[1].position)
    );
    assert!(
        lines
            .iter()
            .all(|l| l.rental.rental_id == rental_a && l.rental.gpu_uuids.len() == 2)
    );
    let settled = LineRange::Positions {
        after: lines[9].position,
        through: lines[19].position,
    };
    assert_eq!(
        store
            .earnings_lines(a, settled, 0, 100)
            .await
            .unwrap()
            .len(),
        10
    );
    assert_eq!(
        store
            .earnings_through(a, lines[19].position)
            .await
            .unwrap()
            .lines,
        20
    );

    let report = audit(&store).await;
    assert!(report.is_clean(), "{:?}", report.findings);
    assert_eq!(report.earnings_lines_checked, 2_300);
    assert_eq!(report.earnings_checkpoint, head);

    // Later lines of both providers, folded together: one more small run each. Then a run's
    // running sums edited by hand (each of its lines then differs from the replay), a run
    // deleted and the providers' cursors edited: each reported.
    for (provider_id, count) in [(a, 3), (b, 2)] {
        let (rental, events) = usage_events(provider_id, count, |i| {
            t0 + SECOND * (5_000 + i64::try_from(i).unwrap())
        });
        store
            .append(
                stream(&format!("rental-{rental}")),
                ExpectedVersion::NoStream,
                events,
            )
            .await
            .unwrap();
    }
    store.run_projections().await.unwrap();
    let later = LineRange::Positions {
        after: head,
        through: store.head_position().await.unwrap(),
    };
    let mut tampered = Vec::new();
    for provider_id in [a, b] {
        let lines = store
            .earnings_lines(provider_id, later, 0, 100)
            .await
            .unwrap();
        tampered.extend(lines.iter().map(|l| l.position));
    }
    tampered.sort_unstable();
    assert_eq!(tampered.len(), 5);
    let statements = [
        format!(
            "UPDATE earnings_line_runs SET before_net = before_net + 1 \
             WHERE provider_id = '{a}' AND first_position > {head}"
        ),
        format!(
            "DELETE FROM earnings_line_runs WHERE provider_id = '{b}' AND first_position > {head}"
        ),
        "UPDATE earnings_providers SET through_lines = through_lines + 1".to_owned(),
    ];
    let statements: Vec<&str> = statements.iter().map(String::as_str).collect();
    db.execute_raw(&statements, &statements).await;
    let report = audit(&store).await;
    let positions: Vec<u64> = report
        .findings
        .iter()
        .filter_map(|f| match f {
            AuditFinding::EarningsLineMismatch { position, .. } => Some(*position),
            _ => None,
        })
        .collect();
    assert_eq!(positions, tampered, "{:?}", report.findings);
    let cursors = report
        .findings
        .iter()
        .filter(|f| matches!(f, AuditFinding::EarningsCursorMismatch { .. }))
        .count();
    assert_eq!(cursors, 2, "{:?}", report.findings);
    assert_eq!(report.first_bad_position(), Some(tampered[0]));

    store.rebuild_projections(&|_| {}).await.unwrap();
    let report = audit(&store).await;
    assert!(report.is_clean(), "{:?}", report.findings);
    assert_eq!(report.earnings_lines_checked, 2_305);
}

/// The earnings lines are stored in runs, one per provider and folded page (ADR 0013). With
/// pages of 3 events, a provider's lines lie in hundreds of runs of one or two lines, several
/// lines share a date across runs, and every read (pages of lines by date and by position, sums
/// between any two instants as of any position, several providers at once) equals the same
/// read computed from the whole list of lines; after a rebuild into a few long runs, the same.
async fn earnings_reads_cross_many_runs(db: &TestDb) {
    use gpunex_domain::time::Timestamp;
    use gpunex_projections::earnings::Line;
    use gpunex_store::earnings::LineRange;
    let store = Store::open(
        &db.url,
        &gpunex_store::StoreOptions {
            fold_page_events: 3,
            // What is carried from page to page starts again at every page.
            carried_rows_max: 2,
            ..gpunex_store::StoreOptions::default()
        },
    )
    .await
    .unwrap();
    const SECOND: i64 = 1_000_000;
    let t0 = 1_790_000_000 * SECOND;
    let (a, b) = (provider(1), provider(2));
    // Three lines of a per second, one of b per second, appended in turns of 5 events.
    let mut streams = [
        usage_events(a, 600, |i| t0 + SECOND * i64::try_from(i / 3).unwrap()),
        usage_events(b, 200, |i| t0 + SECOND * i64::try_from(i).unwrap()),
    ];
    append_in_turns(&store, &mut streams).await;
    store.run_projections().await.unwrap();
    let head = store.head_position().await.unwrap();
    let at = |s: i64| Timestamp::from_unix_micros(t0 + s * SECOND);
    let all = (Timestamp::from_unix_micros(0), at(1_000_000));
    let read_all = |provider_id: uuid::Uuid, range: LineRange, page: usize| {
        let store = &store;
        async move {
            let mut lines: Vec<Line> = Vec::new();
            loop {
                let after = lines.last().map_or(0, |l| l.position);
                let more = store
                    .earnings_lines(provider_id, range, after, page)
                    .await
                    .unwrap();
                let done = more.len() < page;
                lines.extend(more);
                if done {
                    return lines;
                }
            }
        }
    };
    let check = |lines_a: Vec<Line>, lines_b: Vec<Line>| {
        let store = &store;
        async move {
            assert_eq!((lines_a.len(), lines_b.len()), (600, 200));
            assert!(lines_a.windows(2).all(|w| w[0].position < w[1].position));
            let by_position = read_all(
                a,
                LineRange::Positions {
                    after: 0,
                    through: head,
                },
                64,
            )
            .await;
            assert_eq!(by_position, lines_a);
            let as_ofs = [head, lines_a[300].position, lines_a[0].position, 1];
            let instants = [0, 1, 17, 99, 100, 150, 199, 200, 201];
            for as_of in as_ofs {
                for (i, from) in instants.iter().enumerate() {
                    for until in &instants[i..] {
                        let (from, until) = (at(*from), at(*until));
                        let made = |lines: &[Line]| {
                            let mut sums = gpunex_projections::earnings::Sums::default();
                            for line in lines
                                .iter()
                                .filter(|l| l.position <= as_of && l.at >= from && l.at < until)
                            {
                                sums.add_sums(gpunex_projections::earnings::Sums::of(line));
                            }
                            sums
                        };
                        let (want_a, want_b) = (made(&lines_a), made(&lines_b));
                        let sums = store.earnings_sums(a, from, until, as_of).await.unwrap();
                        assert_eq!(sums, want_a, "{from:?} {until:?} {as_of}");
                        let together = store
                            .earnings_sums_of(&[b, provider(9), a], from, until, as_of)
                            .await
                            .unwrap();
                        assert_eq!(together, vec![want_b, Default::default(), want_a]);
                        // A page of lines from a cursor in the middle of the range.
                        let dated = LineRange::Dated { from, until, as_of };
                        let wanted: Vec<&Line> = lines_a
                            .iter()
                            .filter(|l| l.position <= as_of && l.at >= from && l.at < until)
                            .collect();
                        let cursor = wanted.get(wanted.len() / 2).map_or(0, |l| l.position);
                        let page = store.earnings_lines(a, dated, cursor, 50).await.unwrap();
                        let expected: Vec<&Line> = wanted
                            .iter()
                            .copied()
                            .filter(|l| l.position > cursor)
                            .take(50)
                            .collect();
                        assert_eq!(page.iter().collect::<Vec<_>>(), expected);
                    }
                }
                let through = store.earnings_through(a, as_of).await.unwrap();
                let lines = lines_a.iter().filter(|l| l.position <= as_of).count();
                assert_eq!(through.lines, lines as u64);
            }
        }
    };
    let dated = LineRange::Dated {
        from: all.0,
        until: all.1,
        as_of: head,
    };
    let (lines_a, lines_b) = (read_all(a, dated, 70).await, read_all(b, dated, 70).await);
    check(lines_a.clone(), lines_b.clone()).await;
    let report = audit(&store).await;
    assert!(report.is_clean(), "{:?}", report.findings);
    assert_eq!(report.earnings_lines_checked, 800);

    // Rebuilt with long runs: the same lines and the same answers.
    let rebuilt = Store::open(&db.url, &gpunex_store::StoreOptions::default())
        .await
        .unwrap();
    assert_eq!(rebuilt.rebuild_earnings().await.unwrap().checkpoint, head);
    assert_eq!(read_all(a, dated, 1_000).await, lines_a);
    check(lines_a, lines_b).await;
    assert!(audit(&rebuilt).await.is_clean());
}

/// The stored rentals projection holds every rental's folded state (usage, end), answers a
/// renter's rentals newest first in keyset pages and a model's rentals still running after an
/// instant, and `audit verify` catches an edited or a missing row; a rebuild repairs them.
async fn rentals_are_stored_paged_and_audited(db: &TestDb) {
    use gpunex_domain::DomainEvent;
    use gpunex_domain::rental::{EndCause, RentalEnded, RentalEvent};
    use gpunex_domain::time::Timestamp;
    let store = db.open().await;
    const SECOND: i64 = 1_000_000;
    let t0 = 1_790_000_000 * SECOND;
    let mut ids = Vec::new();
    for (n, lines) in [(1, 3), (2, 0), (3, 0)] {
        let (rental_id, events) = usage_events(provider(n), lines, |i| {
            t0 + SECOND * i64::try_from(i).unwrap()
        });
        store
            .append(
                stream(&format!("rental-{rental_id}")),
                ExpectedVersion::NoStream,
                events,
            )
            .await
            .unwrap();
        ids.push(rental_id);
    }
    let (a, b, c) = (ids[0], ids[1], ids[2]);
    let ended = RentalEvent::Ended(RentalEnded {
        rental_id: b,
        cause: EndCause::RenterCancelled,
        ended_at: Timestamp::from_unix_micros(t0 + SECOND),
        ended_by: "test".to_owned(),
        evidence: String::new(),
    });
    let head = store
        .append(
            stream(&format!("rental-{b}")),
            ExpectedVersion::Exact(1),
            vec![gpunex_tests::new_event(&DomainEvent::Rental(ended))],
        )
        .await
        .unwrap()
        .last_position();
    // Nothing folded yet: a read as of the head folds what it needs first.
    assert_eq!(store.rentals_checkpoint().await.unwrap(), 0);
    let stored = store.stored_rental(a, head).await.unwrap().unwrap();
    assert_eq!(store.rentals_checkpoint().await.unwrap(), head);
    assert_eq!(stored.meter.gpu_seconds, 30);
    assert_eq!(stored.meter.charged.micros(), 1_000 + 1_001 + 1_002);
    assert_eq!(stored.stream_version, 4);
    assert!(stored.ended.is_none());
    let stored_b = store.stored_rental(b, head).await.unwrap().unwrap();
    assert_eq!(stored_b.stream_version, 2);
    assert!(stored_b.ended.is_some() && !stored_b.is_open());
    assert!(
        store
            .stored_rental(uuid::Uuid::now_v7(), head)
            .await
            .unwrap()
            .is_none()
    );

    // Newest first (rental ids are time-ordered), a page of two, then the rest.
    let renter = provider(900);
    let id_of = |r: &gpunex_projections::market::RentalState| r.started.rental_id;
    let first = store.renter_rentals(renter, None, 2, head).await.unwrap();
    assert_eq!(first.iter().map(id_of).collect::<Vec<_>>(), vec![c, b]);
    let rest = store
        .renter_rentals(renter, Some(b), 2, head)
        .await
        .unwrap();
    assert_eq!(rest.iter().map(id_of).collect::<Vec<_>>(), vec![a]);
    assert!(
        store
            .renter_rentals(provider(901), None, 10, head)
            .await
            .unwrap()
            .is_empty()
    );
    // Still running (or ended) at or after t0 + 2 s: a and c; b ended before.
    let since = store
        .model_rentals_since(
            "h100-80gb",
            Timestamp::from_unix_micros(t0 + 2 * SECOND),
            head,
        )
        .await
        .unwrap();
    assert_eq!(since.iter().map(id_of).collect::<Vec<_>>(), vec![a, c]);

    let report = audit(&store).await;
    assert!(report.is_clean(), "{:?}", report.findings);
    assert_eq!(
        (report.rentals_checkpoint, report.rentals_checked),
        (head, 3)
    );

    // A row's end moved by hand and a row deleted: each reported; a rebuild repairs them.
    let edit = format!("UPDATE rentals SET until_us = 5 WHERE rental_id = '{c}'");
    let delete = format!("DELETE FROM rentals WHERE rental_id = '{a}'");
    db.execute_raw(&[&edit, &delete], &[&edit, &delete]).await;
    let report = audit(&store).await;
    let mut bad: Vec<String> = report
        .findings
        .iter()
        .filter_map(|f| match f {
            AuditFinding::RentalMismatch { rental_id, .. } => Some(rental_id.clone()),
            _ => None,
        })
        .collect();
    bad.sort();
    let mut expected = vec![a.to_string(), c.to_string()];
    expected.sort();
    assert_eq!(bad, expected, "{:?}", report.findings);
    store.rebuild_projections(&|_| {}).await.unwrap();
    let report = audit(&store).await;
    assert!(report.is_clean(), "{:?}", report.findings);
    assert_eq!(report.rentals_checked, 3);
}

/// The stored payouts projection holds every payout's whole life and every batch, answers a
/// batch's payouts in keyset pages in the order they were scheduled, a provider's payouts and the
/// queues, and `audit verify` catches an edited payout row and a missing batch row; a rebuild
/// repairs them.
async fn payouts_are_stored_paged_and_audited(db: &TestDb) {
    use gpunex_domain::DomainEvent;
    use gpunex_domain::money::Usdc;
    use gpunex_domain::payouts::{
        self as rules, BatchCreated, Confirmation, PayoutConfirmed, PayoutEvent, PayoutFailed,
        PayoutMethod, PayoutScheduled, Schedule, SettledLines,
    };
    use gpunex_domain::time::Timestamp;
    use gpunex_projections::payouts::PayoutStatus;
    let store = db.open().await;
    let date = chrono::NaiveDate::from_ymd_opt(2026, 11, 2).unwrap();
    let batch_id = uuid::Uuid::now_v7();
    let at = Timestamp::from_unix_micros(1_790_000_000_000_000);
    let payout = |e: PayoutEvent| gpunex_tests::new_event(&DomainEvent::Payout(e));
    // Five payouts of two providers, scheduled in this order: 1, 2, ..., 5 USDC.
    let mut ids = Vec::new();
    for n in 1..=5_i64 {
        let provider_id = provider(if n % 2 == 0 { 2 } else { 1 });
        let amount = Usdc::from_micros(n * 1_000_000);
        let payout_id = uuid::Uuid::now_v7();
        let scheduled = PayoutEvent::Scheduled(PayoutScheduled {
            payout_id,
            batch_id,
            provider_id,
            payout_date: date,
            period: "weekly-2026-11-02".to_owned(),
            schedule: Schedule::Weekly,
            method: PayoutMethod::Solana {
                wallet: "6x5SYnLroiN7WYq8NQYU9KHcH4YjpBbwpUfVu3EB7ieH".to_owned(),
            },
            cutoff: at,
            lines: SettledLines {
                after_position: 0,
                through_position: 0,
                count: 0,
                net: amount,
            },
            brought_forward: Usdc::ZERO,
            amount,
            carried: Usdc::ZERO,
            postings: rules::schedule_entry(provider_id, amount).unwrap(),
            scheduled_at: at,
        });
        store
            .append(
                stream(&format!("payout-{payout_id}")),
                ExpectedVersion::NoStream,
                vec![payout(scheduled)],
            )
            .await
            .unwrap();
        ids.push((payout_id, provider_id, amount));
    }
    let created = PayoutEvent::BatchCreated(BatchCreated {
        batch_id,
        payout_date: date,
        cutoff: at,
        payout_count: 5,
        total: Usdc::from_micros(15_000_000),
        rolled_forward_count: 0,
        rolled_forward: Vec::new(),
        created_at: at,
    });
    store
        .append(
            stream("payout_batch-2026-11-02"),
            ExpectedVersion::NoStream,
            vec![payout(created)],
        )
        .await
        .unwrap();
    // The first is paid, the second fails.
    let (first, first_provider, first_amount) = ids[0];
    let confirmed = PayoutEvent::Confirmed(PayoutConfirmed {
        payout_id: first,
        provider_id: first_provider,
        amount: first_amount,
        confirmation: Confirmation::Solana {
            signature: "sig".to_owned(),
            slot: 7,
        },
        postings: rules::confirm_entry(first_provider, first_amount).unwrap(),
        confirmed_at: at,
    });
    store
        .append(
            stream(&format!("payout-{first}")),
            ExpectedVersion::Exact(1),
            vec![payout(confirmed)],
        )
        .await
        .unwrap();
    let (second, second_provider, second_amount) = ids[1];
    let failed = PayoutEvent::Failed(PayoutFailed {
        payout_id: second,
        provider_id: second_provider,
        amount: second_amount,
        reason_code: "transaction_failed".to_owned(),
        reason: "the transaction failed".to_owned(),
        postings: rules::fail_entry(second_provider, second_amount).unwrap(),
        failed_at: at,
        failed_by: "test".to_owned(),
    });
    let head = store
        .append(
            stream(&format!("payout-{second}")),
            ExpectedVersion::Exact(1),
            vec![payout(failed)],
        )
        .await
        .unwrap()
        .last_position();

    // Nothing folded yet: a read as of the head folds what it needs first.
    assert_eq!(store.payouts_checkpoint().await.unwrap(), 0);
    let paid = store.stored_payout(first, head).await.unwrap().unwrap();
    assert_eq!(store.payouts_checkpoint().await.unwrap(), head);
    assert_eq!((paid.status(), paid.version), (PayoutStatus::Confirmed, 2));
    let returned = store.stored_payout(second, head).await.unwrap().unwrap();
    assert_eq!(returned.status(), PayoutStatus::Failed);
    assert!(
        store
            .stored_payout(uuid::Uuid::now_v7(), head)
            .await
            .unwrap()
            .is_none()
    );
    let id_of = |r: &gpunex_projections::payouts::PayoutRecord| r.scheduled.payout_id;
    let mine = store.provider_payouts(provider(1), head).await.unwrap();
    assert_eq!(
        mine.iter().map(id_of).collect::<Vec<_>>(),
        vec![ids[0].0, ids[2].0, ids[4].0]
    );

    // The batch, and its payouts in pages of two in the order they were scheduled.
    let batch = store.stored_batch_on(date, head).await.unwrap().unwrap();
    assert_eq!(batch.batch_id, batch_id);
    assert_eq!(batch.version, 1);
    let mut listed = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .batch_payouts(&batch, after, 2)
            .await
            .unwrap()
            .unwrap();
        assert!(page.len() <= 2);
        let Some(last) = page.last() else { break };
        after = Some(id_of(last));
        listed.extend(page.iter().map(id_of));
    }
    let all: Vec<uuid::Uuid> = ids.iter().map(|(id, _, _)| *id).collect();
    assert_eq!(listed, all);
    assert!(
        store
            .batch_payouts(&batch, Some(uuid::Uuid::now_v7()), 2)
            .await
            .unwrap()
            .is_none(),
        "a cursor that is not one of the batch's payouts"
    );
    let statuses = store.batch_statuses(&batch).await.unwrap();
    assert_eq!(
        statuses.into_iter().collect::<Vec<_>>(),
        vec![
            (PayoutStatus::Scheduled, 3),
            (PayoutStatus::Confirmed, 1),
            (PayoutStatus::Failed, 1)
        ]
    );
    let totals: Vec<(PayoutStatus, u64, i64)> = store
        .payout_totals()
        .await
        .unwrap()
        .iter()
        .map(|t| (t.status, t.payouts, t.micro_usdc))
        .collect();
    assert_eq!(
        totals,
        vec![
            (PayoutStatus::Confirmed, 1, 1_000_000),
            (PayoutStatus::Failed, 1, 2_000_000),
            (PayoutStatus::Scheduled, 3, 12_000_000)
        ]
    );

    let report = audit(&store).await;
    assert!(report.is_clean(), "{:?}", report.findings);
    assert_eq!(
        (report.payouts_checkpoint, report.payouts_checked),
        (head, 6)
    );

    // A payout's status changed by hand and the batch's row deleted: each reported; a rebuild
    // repairs them.
    let third = ids[2].0;
    let edit = format!("UPDATE payouts SET status = 'confirmed' WHERE payout_id = '{third}'");
    let delete = format!("DELETE FROM payout_batches WHERE batch_id = '{batch_id}'");
    db.execute_raw(&[&edit, &delete], &[&edit, &delete]).await;
    let report = audit(&store).await;
    let mut bad: Vec<String> = report
        .findings
        .iter()
        .filter_map(|f| match f {
            AuditFinding::PayoutMismatch { row, .. } => Some(row.clone()),
            _ => None,
        })
        .collect();
    bad.sort();
    let mut expected = vec![format!("batch {batch_id}"), format!("payout {third}")];
    expected.sort();
    assert_eq!(bad, expected, "{:?}", report.findings);
    store.rebuild_projections(&|_| {}).await.unwrap();
    let report = audit(&store).await;
    assert!(report.is_clean(), "{:?}", report.findings);
    assert_eq!(report.payouts_checked, 6);
}

async fn runner_folds_every_event_once(db: &TestDb) {
    let store = db.open().await;
    let expected = seed_credits(&store, 2_500, 7).await;
    let report = store.run_projections().await.unwrap();
    assert_eq!((report.events, report.checkpoint), (2_500, 2_500));
    assert_eq!(
        store.run_projections().await.unwrap().events,
        0,
        "nothing twice"
    );
    let balances = store.balances().await.unwrap();
    for (provider_id, total) in &expected {
        let account = Account::ProviderPayable(*provider_id);
        assert_eq!(
            balances[&account].balance(account).unwrap().micros(),
            *total
        );
    }
    let adjustments = balances[&Account::PlatformAdjustments];
    assert_eq!(adjustments.debits.micros(), expected.values().sum::<i64>());
    let status = store.projection_status().await.unwrap();
    assert_eq!(status[0].lag(), 0);
    let lines = store
        .journal_lines(Some(Account::ProviderPayable(provider(0))), 0, 10_000)
        .await
        .unwrap();
    let lines_total: i64 = lines.iter().map(|line| line.amount.micros()).sum();
    assert_eq!(
        lines_total,
        expected[&provider(0)],
        "journal lines add up to the balance"
    );
    assert!(audit(&store).await.is_clean());
}

/// An account's statement, read `limit` lines at a time as the HTTP API pages it.
async fn statement_in_pages(
    store: &Store,
    account: Account,
    limit: usize,
) -> Vec<gpunex_projections::ledger::LedgerLine> {
    let mut lines = Vec::new();
    let mut after = 0;
    loop {
        let page = store
            .journal_lines(Some(account), after, limit)
            .await
            .unwrap();
        let Some(last) = page.last() else {
            return lines;
        };
        assert!(page.len() <= limit);
        after = last.position;
        lines.extend(page);
    }
}

async fn statements_page_through_many_postings_rows(db: &TestDb) {
    let store = db.open().await;
    // One postings row per account and folded batch: fold after every 3 appends, 100 times.
    for round in 0..100 {
        for _ in 0..3 {
            store
                .append(
                    stream(&format!("ledger-rounds{round}-{}", uuid::Uuid::now_v7())),
                    ExpectedVersion::NoStream,
                    credits(provider(round % 2), 1),
                )
                .await
                .unwrap();
        }
        store.run_projections().await.unwrap();
    }
    let all = store.journal_lines(None, 0, 10_000).await.unwrap();
    assert_eq!(all.len(), 600);
    for account in [
        Account::ProviderPayable(provider(0)),
        Account::PlatformAdjustments,
    ] {
        let whole: Vec<_> = all
            .iter()
            .filter(|l| l.account == account)
            .cloned()
            .collect();
        assert_eq!(
            store.journal_lines(Some(account), 0, 10_000).await.unwrap(),
            whole
        );
        assert_eq!(statement_in_pages(&store, account, 7).await, whole);
        let after = whole[100].position;
        assert_eq!(
            store.journal_lines(Some(account), after, 5).await.unwrap(),
            whole[101..106].to_vec()
        );
    }
    assert!(
        store
            .journal_lines(Some(Account::Treasury), 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(audit(&store).await.is_clean());
}

/// A database from before ADR 0013 (one `earnings_lines` row per line, one
/// `earnings_gpu_hours` row per GPU and hour) is upgraded by its migrations: the old tables go,
/// the projection's rentals, cursors and hours are emptied with its checkpoint, and the refold
/// gives the same sums, lines and figures, not doubled.
async fn earnings_lines_of_one_row_each_are_dropped_and_refolded(db: &TestDb) {
    // Migration 0018 (SQLite) or 0017 (PostgreSQL) and 0019 not applied yet.
    let runs = if db.is_postgres() { 17 } else { 18 };
    earnings_of_an_older_layout_are_dropped_and_refolded(
        db,
        &[
            "DROP TABLE earnings_line_runs".to_owned(),
            "DROP TABLE earnings_hours".to_owned(),
            "CREATE TABLE earnings_lines (position BIGINT NOT NULL PRIMARY KEY)".to_owned(),
            "CREATE TABLE earnings_gpu_hours (provider_id TEXT NOT NULL)".to_owned(),
            format!("DELETE FROM _sqlx_migrations WHERE version IN ({runs}, 19)"),
        ],
        &["earnings_lines", "earnings_gpu_hours"],
    )
    .await;
}

/// A database from before ADR 0017 (one `earnings_gpu_hours` row per GPU and hour) is upgraded
/// by migration 0019 the same way.
async fn earnings_hours_of_one_row_per_gpu_are_dropped_and_refolded(db: &TestDb) {
    earnings_of_an_older_layout_are_dropped_and_refolded(
        db,
        &[
            "DROP TABLE earnings_hours".to_owned(),
            "CREATE TABLE earnings_gpu_hours (provider_id TEXT NOT NULL, hour_us BIGINT NOT NULL)"
                .to_owned(),
            "DELETE FROM _sqlx_migrations WHERE version = 19".to_owned(),
        ],
        &["earnings_gpu_hours"],
    )
    .await;
}

/// Folds 50 lines, turns the database into an older layout with `before` (the migrations that
/// replaced it not applied yet), and checks that opening it again drops the `old` tables,
/// empties the projection and refolds it to the same reads.
async fn earnings_of_an_older_layout_are_dropped_and_refolded(
    db: &TestDb,
    before: &[String],
    old: &[&str],
) {
    use gpunex_domain::time::Timestamp;
    use gpunex_store::earnings::LineRange;
    let store = db.open().await;
    const SECOND: i64 = 1_000_000;
    let t0 = 1_790_000_000 * SECOND;
    let (rental, events) = usage_events(provider(1), 50, |i| {
        t0 + 600 * SECOND * i64::try_from(i).unwrap()
    });
    store
        .append(
            stream(&format!("rental-{rental}")),
            ExpectedVersion::NoStream,
            events,
        )
        .await
        .unwrap();
    store.run_projections().await.unwrap();
    let head = store.head_position().await.unwrap();
    let all = (
        Timestamp::from_unix_micros(0),
        Timestamp::from_unix_micros(i64::MAX),
    );
    let range = LineRange::Dated {
        from: all.0,
        until: all.1,
        as_of: head,
    };
    let day = [t0, t0 + 86_400 * SECOND].map(Timestamp::from_unix_micros);
    let sums = store
        .earnings_sums(provider(1), all.0, all.1, head)
        .await
        .unwrap();
    let lines = store
        .earnings_lines(provider(1), range, 0, 100)
        .await
        .unwrap();
    let figures = store
        .earnings_figures(provider(1), &day, head)
        .await
        .unwrap();
    assert_eq!((sums.lines, lines.len()), (50, 50));
    drop(store);
    for statement in before {
        db.try_execute_raw(statement).await.unwrap();
    }
    let store = db.open().await;
    assert_eq!(store.earnings_checkpoint().await.unwrap(), 0);
    for table in old {
        let select = format!("SELECT 1 FROM {table}");
        assert!(db.try_execute_raw(&select).await.is_err(), "{table}");
    }
    store.run_projections().await.unwrap();
    assert_eq!(
        store
            .earnings_sums(provider(1), all.0, all.1, head)
            .await
            .unwrap(),
        sums
    );
    assert_eq!(
        store
            .earnings_lines(provider(1), range, 0, 100)
            .await
            .unwrap(),
        lines
    );
    assert_eq!(
        store
            .earnings_figures(provider(1), &day, head)
            .await
            .unwrap(),
        figures
    );
    assert!(audit(&store).await.is_clean());
}

async fn a_journal_of_one_row_per_posting_is_dropped_and_refolded(db: &TestDb) {
    // The layout before ADR 0012: one row per posting in `ledger_entries`.
    journal_of_an_older_layout_is_dropped_and_refolded(
        db,
        "CREATE TABLE ledger_entries (position BIGINT NOT NULL, line_index INTEGER NOT NULL)",
        "ledger_entries",
    )
    .await;
}

async fn a_journal_of_one_row_per_entry_is_dropped_and_refolded(db: &TestDb) {
    // ADR 0012's layout: one `ledger_journal` row per entry.
    journal_of_an_older_layout_is_dropped_and_refolded(
        db,
        "CREATE TABLE ledger_journal (position BIGINT PRIMARY KEY, entry_id BYTEA, lines BYTEA)",
        "ledger_journal",
    )
    .await;
}

/// A database whose ledger has the layout `create` makes (instead of the blocks and their
/// postings rows) is opened: the old table is dropped and the ledger refolded from the log.
async fn journal_of_an_older_layout_is_dropped_and_refolded(
    db: &TestDb,
    create: &str,
    table: &str,
) {
    let store = db.open().await;
    seed_credits(&store, 300, 2).await;
    store.run_projections().await.unwrap();
    let payable = Account::ProviderPayable(provider(1));
    let lines = store.journal_lines(None, 0, 10_000).await.unwrap();
    let statement = store.journal_lines(Some(payable), 0, 10_000).await.unwrap();
    let balances = store.balances().await.unwrap();
    assert_eq!((lines.len(), statement.len()), (600, 150));
    drop(store);
    let create = if db.is_postgres() {
        create.to_owned()
    } else {
        create.replace("BIGINT", "INTEGER").replace("BYTEA", "BLOB")
    };
    for statement in [
        "DROP TABLE ledger_journal_blocks",
        "DROP TABLE ledger_postings",
        create.as_str(),
    ] {
        db.try_execute_raw(statement).await.unwrap();
    }
    let store = db.open().await;
    assert_eq!(store.projection_status().await.unwrap()[0].checkpoint, 0);
    assert!(
        db.try_execute_raw(&format!("SELECT 1 FROM {table}"))
            .await
            .is_err()
    );
    store.run_projections().await.unwrap();
    assert_eq!(store.journal_lines(None, 0, 10_000).await.unwrap(), lines);
    assert_eq!(
        store.journal_lines(Some(payable), 0, 10_000).await.unwrap(),
        statement
    );
    assert_eq!(store.balances().await.unwrap(), balances);
    assert!(audit(&store).await.is_clean());
}

async fn failure_mid_batch_neither_loses_nor_doubles(db: &TestDb) {
    let store = db.open().await;
    seed_credits(&store, 5_000, 3).await;
    // A failure inside the transaction of the second batch (events 2001..4000), after some of
    // its rows were already written.
    db.execute_raw(
        &["CREATE TRIGGER fail_mid_batch BEFORE INSERT ON ledger_journal_blocks \
           WHEN NEW.first_position <= 3000 AND NEW.position >= 3000 BEGIN SELECT RAISE(ABORT, 'injected failure'); END"],
        &[
            "CREATE FUNCTION fail_mid_batch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
             IF NEW.first_position <= 3000 AND NEW.position >= 3000 THEN RAISE EXCEPTION 'injected failure'; END IF; RETURN NEW; END $$",
            "CREATE TRIGGER fail_mid_batch BEFORE INSERT ON ledger_journal_blocks FOR EACH ROW EXECUTE FUNCTION fail_mid_batch()",
        ],
    )
    .await;
    let error = store.run_projections().await.unwrap_err();
    assert!(error.to_string().contains("injected failure"), "{error}");
    let status = store.projection_status().await.unwrap()[0];
    assert_eq!(
        status.checkpoint, 2_000,
        "first batch committed, second rolled back"
    );
    assert!(
        store
            .journal_lines(None, 2_000, 10)
            .await
            .unwrap()
            .is_empty(),
        "no row of the failed batch survived"
    );
    let partial = audit(&store).await;
    assert!(
        partial.is_clean(),
        "read model consistent at its checkpoint: {:?}",
        partial.findings
    );

    db.execute_raw(
        &["DROP TRIGGER fail_mid_batch"],
        &["DROP TRIGGER fail_mid_batch ON ledger_journal_blocks"],
    )
    .await;
    store.run_projections().await.unwrap();
    let resumed_balances = store.balances().await.unwrap();
    let resumed_lines = store.journal_lines(None, 0, 10_000).await.unwrap();
    assert_eq!(resumed_lines.len(), 10_000);

    let rebuilt_at = store.rebuild_projections(&|_| {}).await.unwrap();
    assert_eq!(rebuilt_at, 5_000);
    assert_eq!(store.balances().await.unwrap(), resumed_balances);
    assert_eq!(
        store.journal_lines(None, 0, 10_000).await.unwrap(),
        resumed_lines
    );
    assert!(audit(&store).await.is_clean());
}

async fn rebuild_swaps_in_fresh_tables_and_repairs_drift(db: &TestDb) {
    let store = db.open().await;
    seed_credits(&store, 1_200, 4).await;
    store.run_projections().await.unwrap();
    let payable = format!("provider_payable:{}", provider(1));
    db.try_execute_raw(&format!(
        "UPDATE ledger_balances SET credits_micro_usdc = credits_micro_usdc + 1 WHERE account = '{payable}'"
    ))
    .await
    .unwrap();
    db.try_execute_raw(
        "DELETE FROM ledger_journal_blocks WHERE first_position <= 17 AND position >= 17",
    )
    .await
    .unwrap();
    // The rows a statement finds the account's entries through.
    let revenue = "platform_adjustments";
    db.try_execute_raw(&format!(
        "DELETE FROM ledger_postings WHERE account = '{revenue}'"
    ))
    .await
    .unwrap();
    let drifted = audit(&store).await;
    assert!(drifted.findings.iter().any(
        |f| matches!(f, AuditFinding::BalanceMismatch { account, .. } if *account == payable)
    ));
    assert!(drifted.findings.iter().any(|f| matches!(
        f,
        AuditFinding::LineMismatch {
            position: 17,
            stored: None,
            ..
        }
    )));
    assert!(
        drifted.findings.iter().any(|f| matches!(
            f,
            AuditFinding::PostingsMismatch { account, stored_entries: 0, replayed_entries, .. }
                if account == revenue && *replayed_entries > 0
        )),
        "{:?}",
        drifted.findings
    );
    assert!(
        drifted
            .findings
            .iter()
            .any(|f| matches!(f, AuditFinding::Unbalanced { source, .. } if source == "stored"))
    );

    // Appends keep arriving while the rebuild runs; the swap folds them in.
    let writer = store.clone();
    let appends = tokio::spawn(async move {
        for _ in 0..20 {
            writer
                .append(
                    stream("ledger-live"),
                    ExpectedVersion::Any,
                    credits(provider(2), 5),
                )
                .await
                .unwrap();
        }
    });
    store.rebuild_projections(&|_| {}).await.unwrap();
    appends.await.unwrap();
    store.run_projections().await.unwrap();
    let repaired = audit(&store).await;
    assert!(repaired.is_clean(), "{:?}", repaired.findings);
    assert_eq!(repaired.ledger_checkpoint, 1_300);
    // A second rebuild works too (names of the swapped tables and indexes are reusable).
    store.rebuild_projections(&|_| {}).await.unwrap();
    assert!(audit(&store).await.is_clean());
}

async fn competing_runners_do_not_double_count(db: &TestDb) {
    let (a, b) = (db.open().await, db.open().await);
    seed_credits(&a, 6_000, 5).await;
    let (ra, rb) = tokio::join!(a.run_projections(), b.run_projections());
    // One may lose a compare-and-set race and stop early; running again finishes the job.
    for result in [ra, rb] {
        if let Err(error) = result {
            assert!(error.to_string().contains("checkpoint moved"), "{error}");
        }
    }
    a.run_projections().await.unwrap();
    let report = audit(&a).await;
    assert!(report.is_clean(), "{:?}", report.findings);
    assert_eq!(report.journal_lines_checked, 12_000);
}

async fn seeded_and_audited(db: &TestDb) -> Store {
    let store = db.open().await;
    seed_credits(&store, 12, 2).await;
    store.run_projections().await.unwrap();
    let clean = audit(&store).await;
    assert!(clean.is_clean(), "{:?}", clean.findings);
    assert_eq!(clean.events_checked, 12);
    store
}

const ALLOW_TAMPERING_SQLITE: &[&str] = &[
    "DROP TRIGGER events_are_immutable_update",
    "DROP TRIGGER events_are_immutable_delete",
];
const ALLOW_TAMPERING_POSTGRES: &[&str] = &["ALTER TABLE events DISABLE TRIGGER USER"];

async fn tamper(db: &TestDb, statements: &[&str]) {
    let mut sqlite = ALLOW_TAMPERING_SQLITE.to_vec();
    sqlite.extend_from_slice(statements);
    let mut postgres = ALLOW_TAMPERING_POSTGRES.to_vec();
    postgres.extend_from_slice(statements);
    db.execute_raw(&sqlite, &postgres).await;
}

async fn audit_reports_edited_rows(db: &TestDb) {
    let store = seeded_and_audited(db).await;
    tamper(
        db,
        &["UPDATE events SET payload = replace(payload, '1000005', '9000005') WHERE position = 6"],
    )
    .await;
    let report = audit(&store).await;
    assert_eq!(
        report.first_bad_position(),
        Some(6),
        "{:?}",
        report.findings
    );
    assert!(
        matches!(
            report.findings[0],
            AuditFinding::HashMismatch { position: 6, .. }
        ),
        "{:?}",
        report.findings
    );
}

async fn audit_reports_deleted_rows(db: &TestDb) {
    let store = seeded_and_audited(db).await;
    tamper(db, &["DELETE FROM events WHERE position = 7"]).await;
    let report = audit(&store).await;
    assert_eq!(report.first_bad_position(), Some(7));
    assert!(
        report.findings.contains(&AuditFinding::PositionGap {
            expected: 7,
            found: 8
        }),
        "{:?}",
        report.findings
    );
}

async fn audit_reports_reordered_rows(db: &TestDb) {
    let store = seeded_and_audited(db).await;
    tamper(
        db,
        &[
            "UPDATE events SET position = 1000 WHERE position = 3",
            "UPDATE events SET position = 3 WHERE position = 4",
            "UPDATE events SET position = 4 WHERE position = 1000",
        ],
    )
    .await;
    let report = audit(&store).await;
    assert_eq!(
        report.first_bad_position(),
        Some(3),
        "{:?}",
        report.findings
    );
}

async fn audit_reports_a_truncated_tail(db: &TestDb) {
    let store = seeded_and_audited(db).await;
    tamper(db, &["DELETE FROM events WHERE position = 12"]).await;
    let report = audit(&store).await;
    assert!(
        report.findings.iter().any(|f| matches!(
            f,
            AuditFinding::HeadMismatch {
                head_position: 12,
                log_position: 11,
                ..
            }
        )),
        "{:?}",
        report.findings
    );
}

async fn events_are_immutable_to_ordinary_sql(db: &TestDb) {
    let _store = seeded_and_audited(db).await;
    for statement in [
        "UPDATE events SET payload = '{}' WHERE position = 1",
        "DELETE FROM events WHERE position = 1",
    ] {
        let error = db.try_execute_raw(statement).await.unwrap_err();
        assert!(
            error.contains("events are immutable"),
            "{statement}: {error}"
        );
    }
}

async fn concurrent_rebuilds_never_mix_their_rows(db: &TestDb) {
    let (a, b) = (db.open().await, db.open().await);
    seed_credits(&a, 25_000, 5).await;
    let (ra, rb) = tokio::join!(
        a.rebuild_projections(&|_| {}),
        b.rebuild_projections(&|_| {})
    );
    let mut swapped = 0;
    for result in [ra, rb] {
        match result {
            Ok(position) => {
                assert_eq!(position, 25_000);
                swapped += 1;
            }
            Err(error) => assert!(error.to_string().contains("took over"), "{error}"),
        }
    }
    assert!(swapped >= 1, "at least one rebuild completes");
    a.run_projections().await.unwrap();
    let report = audit(&a).await;
    assert!(report.is_clean(), "{:?}", report.findings);
    assert_eq!(report.journal_lines_checked, 50_000);
    // A later rebuild still works after a superseded one left nothing behind to clean up.
    a.rebuild_projections(&|_| {}).await.unwrap();
    assert!(audit(&a).await.is_clean());
}

async fn subscriptions_stop_at_a_gap_without_skipping(db: &TestDb) {
    let store = seeded_and_audited(db).await;
    tamper(db, &["DELETE FROM events WHERE position = 3"]).await;
    let mut subscription = store.subscribe(0).await;
    for _ in 0..2 {
        let error = subscription.next_batch(100).await.unwrap_err();
        assert!(error.to_string().contains("gap"), "{error}");
        assert_eq!(
            subscription.position(),
            0,
            "nothing counts as delivered past a gap"
        );
    }
}

async fn audit_reports_an_undecodable_event_past_the_checkpoint(db: &TestDb) {
    let store = seeded_and_audited(db).await;
    store
        .append(
            stream("ledger-late"),
            ExpectedVersion::NoStream,
            credits(provider(1), 1),
        )
        .await
        .unwrap();
    tamper(
        db,
        &["UPDATE events SET payload = '{\"not\": \"an adjustment\"}' WHERE position = 13"],
    )
    .await;
    let report = audit(&store).await;
    assert_eq!(report.ledger_checkpoint, 12);
    assert!(
        report
            .findings
            .iter()
            .any(|f| matches!(f, AuditFinding::Undecodable { position: 13, .. })),
        "{:?}",
        report.findings
    );
}

/// The dashboard's per-GPU and per-model figures, read from the stored hours and the lines of
/// the hours they cannot say, equal the line-by-line split of the same lines: rentals of one,
/// three and eight GPUs under two models, over several hours; periods on whole hours, on half
/// and quarter hours (zones such as Asia/Kolkata and Asia/Kathmandu), inside one hour, and as
/// of an earlier position (hours holding later lines). `audit verify` compares every stored
/// hour with its lines, and an hour changed by hand is both reported and read.
async fn earnings_figures_equal_the_line_by_line_split(db: &TestDb) {
    use gpunex_domain::time::Timestamp;
    use gpunex_projections::earnings::Figures;
    use gpunex_store::earnings::LineRange;
    let store = db.open().await;
    let provider_id = provider(7);
    const SECOND: i64 = 1_000_000;
    const HOUR: i64 = 3_600 * SECOND;
    // A whole hour, plus 7 minutes: the lines start inside an hour.
    let h0 = 1_790_000_000 * SECOND / HOUR * HOUR;
    let t0 = h0 + 7 * 60 * SECOND;
    let eight = ["G0", "G1", "G2", "G3", "G4", "G5", "G6", "G7"];
    let rentals: Vec<(uuid::Uuid, Vec<gpunex_store::NewEvent>)> = [
        (&["G9"][..], "h100-80gb", 61),
        (&["GPU-x", "GPU-y", "GPU-z"][..], "a100-80gb", 47),
        (&eight[..], "h100-80gb", 73),
    ]
    .into_iter()
    .enumerate()
    .map(|(k, (gpus, model, step))| {
        usage_events_of(provider_id, gpus, model, 300, |i| {
            t0 + SECOND * (i64::try_from(i).unwrap() * step + i64::try_from(k).unwrap())
        })
    })
    .collect();
    // Appended in rounds of ten events of each rental, so the three rentals' lines interleave in
    // the log as they would in time (a provider's dates never go backwards).
    let mut positions = Vec::new();
    for round in 0..31 {
        for (rental, events) in &rentals {
            let chunk: Vec<_> = events.iter().skip(round * 10).take(10).cloned().collect();
            if chunk.is_empty() {
                continue;
            }
            let committed = store
                .append(
                    stream(&format!("rental-{rental}")),
                    ExpectedVersion::Any,
                    chunk,
                )
                .await
                .unwrap();
            positions.push(committed.last_position());
        }
    }
    store.run_projections().await.unwrap();
    let head = store.head_position().await.unwrap();
    let at = |us: i64| Timestamp::from_unix_micros(us);
    let lines_in = |from: Timestamp, until: Timestamp, as_of: u64| {
        let store = store.clone();
        async move {
            let range = LineRange::Dated { from, until, as_of };
            store
                .earnings_lines(provider_id, range, 0, 10_000)
                .await
                .unwrap()
        }
    };
    let minute = 60 * SECOND;
    let windows = [
        (h0, h0 + 8 * HOUR),
        (h0 + HOUR, h0 + 5 * HOUR),
        (h0 + 30 * minute, h0 + 5 * HOUR + 45 * minute),
        (h0 + 2 * HOUR + 10 * minute, h0 + 2 * HOUR + 50 * minute),
        (h0 + 2 * HOUR + 10 * minute, h0 + 3 * HOUR + 50 * minute),
        (h0 + 9 * HOUR, h0 + 10 * HOUR),
    ];
    for as_of in [head, positions[40], positions[7]] {
        for (from, until) in windows {
            let lines = lines_in(at(from), at(until), as_of).await;
            let want = Figures::of_lines(&lines);
            let got = store
                .earnings_figures(provider_id, &[at(from), at(until)], as_of)
                .await
                .unwrap();
            assert_eq!(
                got,
                std::slice::from_ref(&want),
                "{from}..{until} as of {as_of}"
            );
            let totals = want.totals();
            assert_eq!(totals.lines, lines.len() as u64);
            assert_eq!(
                totals.net,
                lines.iter().map(|l| l.net.micros()).sum::<i64>()
            );
        }
        // Periods in one read: whole hours, half and quarter hours, one inside an hour, an empty
        // last one; each equal to its own read, a line on a bound in the later period only.
        let bounds = [
            h0,
            h0 + HOUR,
            h0 + HOUR + 30 * minute,
            h0 + 2 * HOUR + 45 * minute,
            h0 + 3 * HOUR,
            h0 + 3 * HOUR + 20 * minute,
            h0 + 6 * HOUR,
            h0 + 9 * HOUR,
            h0 + 11 * HOUR,
        ];
        let bounds: Vec<Timestamp> = bounds.into_iter().map(at).collect();
        let periods = store
            .earnings_figures(provider_id, &bounds, as_of)
            .await
            .unwrap();
        assert_eq!(periods.len(), bounds.len() - 1);
        let mut all = Figures::default();
        for (pair, got) in bounds.windows(2).zip(&periods) {
            let lines = lines_in(pair[0], pair[1], as_of).await;
            assert_eq!(got, &Figures::of_lines(&lines), "{pair:?} as of {as_of}");
            all.add(got);
        }
        assert!(periods.last().unwrap().is_empty());
        let whole = lines_in(bounds[0], bounds[bounds.len() - 1], as_of).await;
        assert_eq!(all, Figures::of_lines(&whole));
    }
    assert!(
        store
            .earnings_figures(provider_id, &[], head)
            .await
            .unwrap()
            .is_empty()
    );
    let all = store
        .earnings_figures(provider_id, &[at(h0), at(h0 + 12 * HOUR)], head)
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(all.per_gpu.len(), 12, "1 + 3 + 8 GPUs");
    assert_eq!(all.per_model.len(), 2);
    let gross: i64 = all.per_gpu.values().map(|s| s.gross).sum();
    assert_eq!(gross, 3 * (0..300).map(|i| 1_000 + i).sum::<i64>());
    assert_eq!(all.totals().lines, 900);
    assert!(
        store
            .earnings_figures(provider(8), &[at(h0), at(h0 + 12 * HOUR)], head)
            .await
            .unwrap()
            .iter()
            .all(Figures::is_empty)
    );

    // Every hour is audited against its lines; one changed by hand is reported, and it is what
    // the dashboard reads (so the hours are read), until a rebuild repairs it.
    let report = audit(&store).await;
    assert!(report.is_clean(), "{:?}", report.findings);
    assert!(report.earnings_hours_checked >= 12 * 5, "{report:?}");
    // The third hour's row is made a copy of the fourth's: every GPU row of it differs from
    // its lines, and the dashboard reads the fourth hour's figures for it.
    let tamper = format!(
        "UPDATE earnings_hours SET (through_position, gpus) = \
         (SELECT through_position, gpus FROM earnings_hours \
          WHERE provider_id = '{provider_id}' AND hour_us = {}) \
         WHERE provider_id = '{provider_id}' AND hour_us = {}",
        h0 + 3 * HOUR,
        h0 + 2 * HOUR
    );
    db.execute_raw(&[&tamper], &[&tamper]).await;
    let report = audit(&store).await;
    let hours: Vec<(String, String)> = report
        .findings
        .iter()
        .filter_map(|f| match f {
            AuditFinding::EarningsHourMismatch { gpu_uuid, hour, .. } => {
                Some((gpu_uuid.clone(), hour.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(hours.len(), 12, "{:?}", report.findings);
    assert_eq!(report.findings.len(), 12, "{:?}", report.findings);
    assert!(hours.iter().any(|(gpu, _)| gpu == "G9"));
    let third = at(h0 + 2 * HOUR).rfc3339();
    assert!(hours.iter().all(|(_, hour)| *hour == third), "{hours:?}");
    let window = [at(h0 + 2 * HOUR), at(h0 + 3 * HOUR)];
    let read = |store: Store| async move {
        store
            .earnings_figures(provider_id, &window, head)
            .await
            .unwrap()
            .pop()
            .unwrap()
    };
    let lines = lines_in(window[0], window[1], head).await;
    let fourth = lines_in(at(h0 + 3 * HOUR), at(h0 + 4 * HOUR), head).await;
    assert_ne!(Figures::of_lines(&lines), Figures::of_lines(&fourth));
    assert_eq!(read(store.clone()).await, Figures::of_lines(&fourth));
    store.rebuild_projections(&|_| {}).await.unwrap();
    assert!(audit(&store).await.is_clean());
    assert_eq!(read(store.clone()).await, Figures::of_lines(&lines));
}

/// A reader far behind the projection (its position before most lines) has every hour with a
/// later line to read from its lines: 590 disjoint hours here, more than one statement's worth
/// (SQLite refuses a compound of over 500 `SELECT`s).
/// Its figures are still exactly those of the lines it may see, per day as for the whole range.
async fn a_reader_far_behind_reads_many_hours_from_their_lines(db: &TestDb) {
    use gpunex_domain::time::Timestamp;
    use gpunex_projections::earnings::Figures;
    use gpunex_store::earnings::LineRange;
    let store = db.open().await;
    let provider_id = provider(9);
    const SECOND: i64 = 1_000_000;
    const HOUR: i64 = 3_600 * SECOND;
    let h0 = 1_790_000_000 * SECOND / HOUR * HOUR;
    // One line every two hours, 10 minutes into its hour: 600 disjoint hours.
    let (rental, events) =
        usage_events_of(provider_id, &["GPU-a", "GPU-b"], "h100-80gb", 600, |i| {
            h0 + 2 * HOUR * i64::try_from(i).unwrap() + 600 * SECOND
        });
    let (first, rest) = events.split_at(11);
    let early = store
        .append(
            stream(&format!("rental-{rental}")),
            ExpectedVersion::NoStream,
            first.to_vec(),
        )
        .await
        .unwrap()
        .last_position();
    store
        .append(
            stream(&format!("rental-{rental}")),
            ExpectedVersion::Any,
            rest.to_vec(),
        )
        .await
        .unwrap();
    store.run_projections().await.unwrap();
    let head = store.head_position().await.unwrap();
    let days: Vec<Timestamp> = (0..=51)
        .map(|d| Timestamp::from_unix_micros(h0 + 24 * HOUR * d))
        .collect();
    for as_of in [early, head] {
        let range = LineRange::Dated {
            from: days[0],
            until: days[51],
            as_of,
        };
        let lines = store
            .earnings_lines(provider_id, range, 0, 10_000)
            .await
            .unwrap();
        assert_eq!(lines.len(), if as_of == head { 600 } else { 10 });
        let whole = store
            .earnings_figures(provider_id, &[days[0], days[51]], as_of)
            .await
            .unwrap();
        assert_eq!(whole, [Figures::of_lines(&lines)], "as of {as_of}");
        let mut summed = Figures::default();
        for day in store
            .earnings_figures(provider_id, &days, as_of)
            .await
            .unwrap()
        {
            summed.add(&day);
        }
        assert_eq!(summed, Figures::of_lines(&lines), "per day, as of {as_of}");
    }
}

/// On PostgreSQL a rebuild ends with `VACUUM (ANALYZE)` of the tables it rewrote, so that the
/// dashboard's index-only reads do not fetch every row from the heap until autovacuum runs
/// (`Store::settle_tables`). SQLite has nothing to check: the rebuild still has to pass.
async fn a_rebuild_leaves_its_tables_vacuumed_and_analyzed(db: &TestDb) {
    use sqlx::Connection;
    let store = db.open().await;
    seed_credits(&store, 2_000, 3).await;
    store.rebuild_projections(&|_| {}).await.unwrap();
    assert!(audit(&store).await.is_clean());
    if !db.is_postgres() {
        return;
    }
    let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let settled: Vec<(String, bool, bool)> = sqlx::query_as(
        "SELECT relname::text, last_vacuum IS NOT NULL, last_analyze IS NOT NULL \
         FROM pg_stat_user_tables WHERE relname = ANY($1) ORDER BY relname",
    )
    .bind(vec![
        "earnings_line_runs",
        "earnings_providers",
        "earnings_rentals",
        "ledger_balances",
        "ledger_journal_blocks",
        "ledger_postings",
        "payout_batches",
        "payouts",
        "rentals",
    ])
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert_eq!(settled.len(), 9, "{settled:?}");
    for (table, vacuumed, analyzed) in settled {
        assert!(
            vacuumed && analyzed,
            "{table} was not vacuumed and analyzed"
        );
    }
}
