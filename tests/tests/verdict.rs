//! The benchmark verdict's own measurement (issue 18, "measured, not claimed"): every catalog
//! model and form factor, 500 healthy simulated GPUs (about 5 % spread within a model) and 60 of
//! each degraded profile at varying severities, judged against the datasheet references.
//! Caught: anything but a pass. Delisted: a fail. Run with `--nocapture` to see the figures.

use gpunex_domain::benchmark::simulated::{Profile, run};
use gpunex_domain::benchmark::{
    Outcome, VERDICT_VERSION, check_plausible, reference, score, verdict,
};
use gpunex_domain::gpu::GPU_CATALOG;

#[test]
fn the_verdict_catches_faulty_gpus_and_spares_healthy_ones() {
    let (mut healthy, mut healthy_delisted, mut healthy_warned) = (0_usize, 0_usize, 0_usize);
    let mut per_profile: Vec<(Profile, usize, usize, usize)> = Vec::new();
    let mut seed = 0_u64;
    for profile in Profile::ALL {
        let (mut seen, mut caught, mut delisted) = (0, 0, 0);
        for model in GPU_CATALOG {
            for variant in model.variants {
                let count = if profile == Profile::Healthy { 500 } else { 60 };
                for _ in 0..count {
                    seed += 1;
                    let run = run(model, variant, "GPU-x", profile, seed);
                    check_plausible(variant, &run).expect("simulated runs are plausible");
                    let scored = score(&run, |metric| {
                        reference(model, variant, metric, run.health.pcie.as_ref(), &[])
                    });
                    let outcome = verdict(variant, &run, &scored).outcome;
                    seen += 1;
                    caught += usize::from(outcome != Outcome::Pass);
                    delisted += usize::from(outcome == Outcome::Fail);
                }
            }
        }
        if profile == Profile::Healthy {
            healthy = seen;
            healthy_delisted = delisted;
            healthy_warned = caught - delisted;
        } else {
            per_profile.push((profile, seen, caught, delisted));
        }
    }
    let faulty: usize = per_profile.iter().map(|p| p.1).sum();
    let caught: usize = per_profile.iter().map(|p| p.2).sum();
    println!("verdict v{VERDICT_VERSION}");
    println!("healthy: {healthy} GPUs, {healthy_delisted} delisted, {healthy_warned} warned");
    for (profile, seen, caught, delisted) in &per_profile {
        println!(
            "{:<22} {seen} GPUs, {caught} caught, {delisted} delisted",
            profile.name()
        );
    }
    println!("faulty: {faulty} GPUs, {caught} caught");
    assert!(caught * 100 >= faulty * 95, "caught {caught} of {faulty}");
    assert!(
        healthy_delisted * 100 <= healthy,
        "delisted {healthy_delisted} of {healthy} healthy GPUs"
    );
}
