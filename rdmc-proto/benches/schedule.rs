//! Schedule computation cost: one member's schedule built and walked through
//! every step (what each member does per message), and whole-group plans.
//!
//! Run with `cargo bench --bench schedule` (add `-- --quick` for a fast pass).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rdmc_proto::schedule::{Algorithm, NodeSchedule, Plan, Schedule};

/// Build member `rank`'s schedule and ask for every step's transfers.
fn walk(algorithm: Algorithm, n: usize, rank: usize, k: usize) -> usize {
    let s = NodeSchedule::new(algorithm, n, rank).unwrap();
    let mut busy = 0;
    for t in 0..s.total_steps(k) {
        busy += usize::from(s.outgoing(k, t).is_some());
        busy += usize::from(s.incoming(k, t).is_some());
    }
    busy + usize::from(s.first_block_for(k).is_some())
}

fn node_schedule(c: &mut Criterion) {
    let mut group = c.benchmark_group("node_schedule");
    for algorithm in [
        Algorithm::BinomialPipeline,
        Algorithm::Chain,
        Algorithm::BinomialTree,
        Algorithm::Sequential,
    ] {
        for n in [16usize, 64, 512] {
            for k in [256usize, 4096] {
                // A relay in the middle of the group; for sequential only the
                // root has work at every step.
                let rank = if algorithm == Algorithm::Sequential {
                    0
                } else {
                    n / 2 + 1
                };
                let steps = NodeSchedule::new(algorithm, n, rank)
                    .unwrap()
                    .total_steps(k);
                group.throughput(Throughput::Elements(steps as u64));
                group.bench_with_input(
                    BenchmarkId::new(algorithm.name(), format!("n{n}/k{k}")),
                    &(n, k),
                    |b, &(n, k)| b.iter(|| walk(algorithm, black_box(n), rank, black_box(k))),
                );
            }
        }
    }
    group.finish();
}

fn binomial_pipeline_new(c: &mut Criterion) {
    // Construction alone: includes the first-block scan (rule (e)).
    let mut group = c.benchmark_group("binomial_pipeline_new");
    for n in [16usize, 64, 512, 1 << 20] {
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            b.iter(|| NodeSchedule::new(Algorithm::BinomialPipeline, black_box(n), n - 1).unwrap())
        });
    }
    group.finish();
}

fn plan(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan");
    for (algorithm, n, k) in [
        (Algorithm::BinomialPipeline, 16, 256),
        (Algorithm::BinomialPipeline, 64, 256),
        (Algorithm::BinomialPipeline, 512, 256),
        (Algorithm::Chain, 64, 256),
        (Algorithm::BinomialTree, 64, 256),
    ] {
        group.throughput(Throughput::Elements(((n - 1) * k) as u64));
        group.bench_with_input(
            BenchmarkId::new(algorithm.name(), format!("n{n}/k{k}")),
            &(n, k),
            |b, &(n, k)| b.iter(|| Plan::new(algorithm, black_box(n), black_box(k)).unwrap()),
        );
    }
    group.throughput(Throughput::Elements(63 * 256));
    group.bench_function("verify/binomial-pipeline/n64/k256", |b| {
        let p = Plan::new(Algorithm::BinomialPipeline, 64, 256).unwrap();
        b.iter(|| black_box(&p).verify().unwrap())
    });
    group.finish();
}

criterion_group!(benches, node_schedule, binomial_pipeline_new, plan);
criterion_main!(benches);
