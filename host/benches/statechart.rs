//! One statechart transition: the flat invoice machine from DESIGN.md, and a machine with three
//! levels of nesting and two parallel regions. Run with `cargo bench -p turnstile --bench
//! statechart`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use turnstile::statechart::{Event, Machine};

fn invoice() -> Machine {
    Machine::from_json(&json!({"id":"invoice","initial":"draft","states":{
        "draft":{"on":{"SUBMIT":"review"}},
        "review":{"on":{"APPROVE":"approved","REJECT":"draft"}},
        "approved":{"on":{"DISCHARGE":"discharged"}},
        "discharged":{"type":"final"}}}))
    .expect("invoice machine is valid")
}

/// Three levels of nesting (`order.fulfil.{shipping,billing}.<leaf>`), two parallel regions.
fn nested() -> Machine {
    Machine::from_json(&json!({"id":"order","initial":"order","states":{
        "order":{"initial":"fulfil","on":{"CANCEL":"cancelled"},"states":{
            "fulfil":{"type":"parallel","onDone":"closed","states":{
                "shipping":{"initial":"packing","states":{
                    "packing":{"on":{"PACKED":"shipping"}},
                    "shipping":{"on":{"DELIVERED":"delivered"}},
                    "delivered":{"type":"final"}}},
                "billing":{"initial":"invoicing","states":{
                    "invoicing":{"on":{"INVOICED":"awaiting"}},
                    "awaiting":{"on":{"PAID":"paid"}},
                    "paid":{"type":"final"}}}}},
            "closed":{"type":"final"}}},
        "cancelled":{"type":"final"}}}))
    .expect("nested machine is valid")
}

fn bench(c: &mut Criterion) {
    let m = invoice();
    let s0 = m.initial_snapshot();
    let submit = Event::new("SUBMIT");
    let ignored = Event::new("DISCHARGE");
    c.bench_function("invoice: draft -SUBMIT-> review", |b| {
        b.iter(|| black_box(m.transition(black_box(&s0), black_box(&submit))))
    });
    c.bench_function("invoice: event with no transition", |b| {
        b.iter(|| black_box(m.transition(black_box(&s0), black_box(&ignored))))
    });

    let m = nested();
    let s0 = m.initial_snapshot();
    let packed = Event::new("PACKED");
    c.bench_function("nested+parallel: region transition (PACKED)", |b| {
        b.iter(|| black_box(m.transition(black_box(&s0), black_box(&packed))))
    });
    let cancel = Event::new("CANCEL");
    c.bench_function("nested+parallel: exit everything (CANCEL)", |b| {
        b.iter(|| black_box(m.transition(black_box(&s0), black_box(&cancel))))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
