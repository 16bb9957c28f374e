//! The simulator's CYCLON loop, compiled: `node/sim/engine.py`'s event loop carrying
//! `node/protocols/cyclon/layer.py` on every node, step for step, so that a run is byte-identical to the
//! Python one (`node/sim/native.py` hands the state over and back; the Python core is the
//! reference, and tests/unit/test_native.py compares the two on the same seeds).
//!
//! Byte identity rests on three things done exactly as Python does them:
//! - the random draws: each node's `random.Random` (MT19937, its state handed over), with
//!   `random()`, `_randbelow` (getrandbits with rejection), `choice` and both of `sample`'s
//!   algorithms;
//! - the event order: one heap ordered by (time, sequence number), the numbers shared with Python;
//! - the dict orders: views, reserves and pending replies are vectors in insertion order, with
//!   Python's rules (a deleted key leaves its place, a new one goes last, an update stays put).

use cyclon::{age_all, expect, take, Cyclon, Pending, Scratch, ViewEntry};
use options::Options;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

mod cyclon;
mod options;
mod poldercast;

// --- Python's random.Random --------------------------------------------------------------------

const MT_N: usize = 624;
const MT_M: usize = 397;

pub(crate) struct Mt {
    state: Vec<u32>,
    index: usize,
}

impl Mt {
    /// From `random.Random.getstate()[1]`: 624 words and the index.
    pub(crate) fn from_state(words: &[u64]) -> PyResult<Mt> {
        if words.len() != MT_N + 1 || words[MT_N] > MT_N as u64 {
            return Err(PyValueError::new_err("not a Mersenne Twister state"));
        }
        Ok(Mt { state: words[..MT_N].iter().map(|&w| w as u32).collect(), index: words[MT_N] as usize })
    }

    pub(crate) fn to_state(&self) -> Vec<u64> {
        let mut out: Vec<u64> = self.state.iter().map(|&w| w as u64).collect();
        out.push(self.index as u64);
        out
    }

    pub(crate) fn next_u32(&mut self) -> u32 {
        const UPPER: u32 = 0x8000_0000;
        const LOWER: u32 = 0x7fff_ffff;
        const MAG: [u32; 2] = [0, 0x9908_b0df];
        let mt = &mut self.state;
        if self.index >= MT_N {
            for kk in 0..MT_N - MT_M {
                let y = (mt[kk] & UPPER) | (mt[kk + 1] & LOWER);
                mt[kk] = mt[kk + MT_M] ^ (y >> 1) ^ MAG[(y & 1) as usize];
            }
            for kk in MT_N - MT_M..MT_N - 1 {
                let y = (mt[kk] & UPPER) | (mt[kk + 1] & LOWER);
                mt[kk] = mt[kk + MT_M - MT_N] ^ (y >> 1) ^ MAG[(y & 1) as usize];
            }
            let y = (mt[MT_N - 1] & UPPER) | (mt[0] & LOWER);
            mt[MT_N - 1] = mt[MT_M - 1] ^ (y >> 1) ^ MAG[(y & 1) as usize];
            self.index = 0;
        }
        let mut y = mt[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// `random.random()`.
    pub(crate) fn random(&mut self) -> f64 {
        let a = (self.next_u32() >> 5) as f64;
        let b = (self.next_u32() >> 6) as f64;
        (a * 67108864.0 + b) * (1.0 / 9007199254740992.0)
    }

    /// `random._randbelow(n)` for 0 < n < 2**32: getrandbits(n.bit_length()) until below n.
    pub(crate) fn randbelow(&mut self, n: usize) -> usize {
        let k = usize::BITS - n.leading_zeros();
        loop {
            let r = (self.next_u32() >> (32 - k)) as usize;
            if r < n {
                return r;
            }
        }
    }

    /// `random.sample(population, k)` (Python 3.11's two algorithms, by its own size rule).
    pub(crate) fn sample<T: Copy>(&mut self, population: &[T], k: usize, out: &mut Vec<T>, pool: &mut Vec<T>) {
        let n = population.len();
        out.clear();
        let mut setsize = 21usize;
        if k > 5 {
            setsize += 4usize.pow(((k * 3) as f64).log(4.0).ceil() as u32);
        }
        if n <= setsize {
            pool.clear();
            pool.extend_from_slice(population);
            for i in 0..k {
                let j = self.randbelow(n - i);
                out.push(pool[j]);
                pool[j] = pool[n - i - 1];
            }
        } else {
            let mut selected: Vec<usize> = Vec::with_capacity(k);
            for _ in 0..k {
                let mut j = self.randbelow(n);
                while selected.contains(&j) {
                    j = self.randbelow(n);
                }
                selected.push(j);
                out.push(population[j]);
            }
        }
    }

    /// `random.shuffle(x)`.
    pub(crate) fn shuffle<T>(&mut self, x: &mut [T]) {
        for i in (1..x.len()).rev() {
            let j = self.randbelow(i + 1);
            x.swap(i, j);
        }
    }
}

// --- protobuf size arithmetic (node/wire/codec.py's wire_size) -----------------------------

pub(crate) fn varint_len(mut v: u64) -> u64 {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

// --- the simulation ---------------------------------------------------------------------------

/// A view entry: a descriptor template (a profile, as Python's `Descriptor` at age 0), its
/// node's id and an age.
#[derive(Clone, Copy, PartialEq)]
struct Entry {
    id: u32,
    tpl: u32,
    age: u32,
}

impl ViewEntry for Entry {
    fn id(&self) -> u32 {
        self.id
    }
    fn age(&self) -> u32 {
        self.age
    }
    fn set_age(&mut self, age: u32) {
        self.age = age;
    }
}

struct Msg {
    src: u32,
    dst: u32,
    reply: bool,
    sender: u32,
    entries: Vec<Entry>,
}

/// Counter keys, in `node/kit/interpret.py`'s names (export order is first use, as a Counter's).
const MSGS_SENT: u8 = 0;
const BYTES_SENT: u8 = 1;
const DROPPED_BY_LINK: u8 = 2;
const LOST_TO_DEAD_PEER: u8 = 3;

struct Node {
    id: u32,
    me: u32,
    alive: bool,
    view: Vec<Entry>,
    reserve: Vec<Entry>,
    pending: Vec<Pending<Vec<u32>>>,
    late: u64,
    rng: Mt,
    timer: Option<f64>,
    stats: Vec<(u8, u64)>,
}

impl Node {
    fn count(&mut self, key: u8, n: u64) {
        match self.stats.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 += n,
            None => self.stats.push((key, n)),
        }
    }
}

pub(crate) const TIMER: u8 = 0;
pub(crate) const MSG: u8 = 1;
pub(crate) const CALL: u8 = 2;

#[derive(Clone, Copy)]
pub(crate) struct Due {
    pub(crate) at: f64,
    pub(crate) seq: u64,
    pub(crate) kind: u8,
    pub(crate) data: u64, // TIMER: node; MSG: slot in `msgs`; CALL: Python's handle
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    /// Reversed (BinaryHeap is a max-heap): the earliest (time, seq) first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.total_cmp(&self.at).then(other.seq.cmp(&self.seq))
    }
}

/// What an engine's event loop is made of: the heap and the clocks it keeps as Python's
/// `Simulation` does, and what it does with a due timer or message.
pub(crate) trait EventLoop {
    fn heap(&mut self) -> &mut BinaryHeap<Due>;
    /// (now, steps, frozen_s)
    fn clocks(&mut self) -> (&mut f64, &mut u64, &mut f64);
    /// A timer (`data`: the engine's numbering) due at `at`: its tick, if it is still armed.
    fn timer(&mut self, data: u64, at: f64);
    /// A message (`data`: its slot) due now.
    fn deliver(&mut self, data: u64);
    /// `settle` held a timer armed for `at`: it is now armed for `at + shift`.
    fn shift_timer(&mut self, data: u64, at: f64, shift: f64);
}

/// `Simulation.run_until`, up to the first scheduled call due: returns its handle (the caller
/// runs it, then calls again), or None once every entry due by `t_end` is done.
pub(crate) fn run_until(l: &mut impl EventLoop, t_end: f64, max_steps: u64) -> PyResult<Option<u64>> {
    while let Some(&due) = l.heap().peek() {
        if due.at > t_end {
            break;
        }
        let (now, steps, _) = l.clocks();
        if *steps >= max_steps {
            return Err(PyValueError::new_err(format!("simulation exceeded {} steps at t={:.3}s", max_steps, now)));
        }
        (*steps, *now) = (*steps + 1, due.at);
        l.heap().pop();
        match due.kind {
            TIMER => l.timer(due.data, due.at),
            MSG => l.deliver(due.data),
            _ => return Ok(Some(due.data)),
        }
    }
    let (now, _, _) = l.clocks();
    if t_end > *now {
        *now = t_end;
    }
    Ok(None)
}

/// `Simulation.run_frozen` with nothing to call: the messages in flight, and those they cause,
/// delivered to completion; timers and calls then resume, shifted.
pub(crate) fn settle(l: &mut impl EventLoop) {
    let (messages, held): (Vec<Due>, Vec<Due>) = l.heap().drain().partition(|d| d.kind == MSG);
    l.heap().extend(messages);
    let start = *l.clocks().0;
    while let Some(due) = l.heap().pop() {
        let (now, steps, _) = l.clocks();
        (*steps, *now) = (*steps + 1, due.at);
        l.deliver(due.data);
    }
    let (now, _, frozen_s) = l.clocks();
    let shift = *now - start;
    *frozen_s += shift;
    for due in held {
        if due.kind == TIMER {
            l.shift_timer(due.data, due.at, shift);
        }
        l.heap().push(Due { at: due.at + shift, ..due });
    }
}

/// The CYCLON overlay of a whole simulation. See `node/sim/native.py` for its use.
#[pyclass(module = "overlaylab_native")]
struct Engine {
    cyclon: Cyclon,
    timeout_s: f64,
    period_s: f64,
    layer_bytes: u64,
    tpl_node: Vec<u32>,
    tpl_profile: Vec<u64>,
    link_delay_ms: f64,
    link_jitter_ms: f64,
    link_loss: f64,
    link_partitioned: bool,
    link_rng: Mt,
    nodes: Vec<Option<Node>>,
    queue: BinaryHeap<Due>,
    msgs: Vec<Msg>,
    free_msgs: Vec<usize>,
    #[pyo3(get)]
    now: f64,
    #[pyo3(get)]
    steps: u64,
    #[pyo3(get)]
    seq: u64,
    #[pyo3(get)]
    frozen_s: f64,
    drawn: Vec<Entry>,
    scratch: Scratch,
    /// A test-only fault (`OVERLAYLAB_NATIVE_DIVERGE_AT_S`, read when the loop is made): the
    /// first CYCLON tick at or after this virtual time ages one view entry twice, so that the
    /// divergence check (node/sim/check.py) has a divergence to find.
    diverge_at: Option<f64>,
}

impl Engine {
    fn node(&mut self, i: u32) -> &mut Node {
        self.nodes[i as usize].as_mut().expect("a node the engine does not hold")
    }

    fn push(&mut self, at: f64, kind: u8, data: u64) {
        self.seq += 1;
        self.queue.push(Due { at, seq: self.seq, kind, data });
    }

    fn new_msg(&mut self, src: u32, dst: u32, reply: bool, sender: u32) -> usize {
        match self.free_msgs.pop() {
            Some(slot) => {
                let m = &mut self.msgs[slot];
                (m.src, m.dst, m.reply, m.sender) = (src, dst, reply, sender);
                m.entries.clear(); // its allocation is reused
                slot
            }
            None => {
                self.msgs.push(Msg { src, dst, reply, sender, entries: Vec::new() });
                self.msgs.len() - 1
            }
        }
    }

    fn wire_size(&self, msg: &Msg) -> u64 {
        let mut size = self.layer_bytes + if msg.reply { 2 } else { 0 };
        let me = Entry { id: 0, tpl: msg.sender, age: 0 };
        for d in std::iter::once(&me).chain(msg.entries.iter()) {
            let mut n = self.tpl_profile[d.tpl as usize];
            if d.age > 0 {
                n += if d.age < 128 { 2 } else { 1 + varint_len(d.age as u64) };
            }
            size += n + if n < 128 { 2 } else { 1 + varint_len(n) };
        }
        size
    }

    /// `Simulation.send`: count the message, apply the link, schedule its delivery.
    fn send(&mut self, slot: usize) {
        let size = self.wire_size(&self.msgs[slot]);
        let (src, now) = (self.msgs[slot].src, self.now);
        let node = self.node(src);
        node.count(MSGS_SENT, 1);
        node.count(BYTES_SENT, size);
        let dropped = self.link_partitioned || (self.link_loss > 0.0 && self.link_rng.random() < self.link_loss);
        if dropped {
            self.node(src).count(DROPPED_BY_LINK, 1);
            self.free_msgs.push(slot);
            return;
        }
        let mut ms = self.link_delay_ms;
        if self.link_jitter_ms != 0.0 {
            let (a, b) = (-self.link_jitter_ms, self.link_jitter_ms);
            ms += a + (b - a) * self.link_rng.random();
        }
        let delay = (if ms > 0.0 { ms } else { 0.0 }) / 1000.0;
        self.push(now + delay, MSG, slot as u64);
    }

    /// `Stack.on_timer` of the CYCLON layer: prune, `Cyclon.exchange`, re-arm.
    fn tick(&mut self, i: u32) {
        let now = self.now;
        let diverge = self.diverge_at.is_some_and(|t| now >= t);
        if diverge {
            self.diverge_at = None;
        }
        let (mut sent, mut scratch) = (std::mem::take(&mut self.drawn), std::mem::take(&mut self.scratch));
        let node = self.nodes[i as usize].as_mut().expect("a node the engine holds");
        node.pending.retain(|p| p.deadline > now);
        if node.view.is_empty() && self.cyclon.refill {
            self.cyclon.refill(&mut node.view, node.reserve.iter().rev().copied());
        }
        if !node.view.is_empty() {
            age_all(node.view.iter_mut());
            if diverge {
                node.view[0].age += 1; // the test-only fault, once
            }
            let q = self.cyclon.exchange(&mut node.view, &mut node.reserve, &mut node.rng, &mut sent, &mut scratch);
            expect(&mut node.pending, q.id, now + self.timeout_s, sent.iter().map(|d| d.id).collect());
            let me = node.me;
            let slot = self.new_msg(i, q.id, false, me);
            let request = &mut self.msgs[slot].entries;
            request.push(Entry { id: self.tpl_node[me as usize], tpl: me, age: 0 });
            request.extend_from_slice(&sent);
            self.send(slot);
        }
        (self.drawn, self.scratch) = (sent, scratch);
        let at = now + self.period_s;
        self.node(i).timer = Some(at);
        self.push(at, TIMER, i as u64);
    }

    /// `Simulation._deliver` of a CYCLON message.
    fn deliver(&mut self, slot: usize) {
        let (src, dst, reply) = (self.msgs[slot].src, self.msgs[slot].dst, self.msgs[slot].reply);
        let alive = self.nodes.get(dst as usize).and_then(Option::as_ref).is_some_and(|n| n.alive);
        if !alive {
            self.node(src).count(LOST_TO_DEAD_PEER, 1);
            self.free_msgs.push(slot);
            return;
        }
        let now = self.now;
        let entries = std::mem::take(&mut self.msgs[slot].entries);
        let (mut answer, mut scratch) = (std::mem::take(&mut self.drawn), std::mem::take(&mut self.scratch));
        let node = self.nodes[dst as usize].as_mut().expect("a node the engine holds");
        if reply {
            if let Some(kept) = take(&mut node.pending, src, now, &mut node.late) {
                self.cyclon.merge(&mut node.view, node.id, &entries, &kept, &mut scratch);
            }
        } else {
            self.cyclon.answer(&node.view, src, &mut node.rng, &mut answer, &mut scratch);
            let ids: Vec<u32> = answer.iter().map(|d| d.id).collect();
            self.cyclon.merge(&mut node.view, node.id, &entries, &ids, &mut scratch);
        }
        let me = node.me;
        self.msgs[slot].entries = entries;
        self.free_msgs.push(slot);
        if !reply {
            let out = self.new_msg(dst, src, true, me);
            self.msgs[out].entries.extend_from_slice(&answer);
            self.send(out);
        }
        (self.drawn, self.scratch) = (answer, scratch);
    }
}

impl EventLoop for Engine {
    fn heap(&mut self) -> &mut BinaryHeap<Due> {
        &mut self.queue
    }

    fn clocks(&mut self) -> (&mut f64, &mut u64, &mut f64) {
        (&mut self.now, &mut self.steps, &mut self.frozen_s)
    }

    fn timer(&mut self, data: u64, at: f64) {
        let i = data as u32;
        let node = self.node(i);
        if node.timer == Some(at) && node.alive {
            node.timer = None;
            self.tick(i);
        }
    }

    fn deliver(&mut self, data: u64) {
        Engine::deliver(self, data as usize);
    }

    fn shift_timer(&mut self, data: u64, at: f64, shift: f64) {
        let node = self.node(data as u32);
        if node.timer == Some(at) {
            node.timer = Some(at + shift);
        }
    }
}

fn entries(tpl_node: &[u32], list: Vec<(u32, u32)>) -> Vec<Entry> {
    list.into_iter().map(|(tpl, age)| Entry { id: tpl_node[tpl as usize], tpl, age }).collect()
}

fn pairs(list: &[Entry]) -> Vec<(u32, u32)> {
    list.iter().map(|d| (d.tpl, d.age)).collect()
}

#[pymethods]
impl Engine {
    /// The layer's config, the link (one rule for every destination, a constant base delay
    /// folded into `delay_ms`) and the links' random state.
    /// `options` by name: CYCLON's `view_size`, `shuffle_length`, `timeout_s`, `period_s`,
    /// `refill`, `layer_bytes` (a message's bytes but its entries); `link` as in `link_options`.
    #[new]
    fn new(nodes: usize, options: Bound<'_, PyDict>, link: Bound<'_, PyDict>, link_rng: Vec<u64>) -> PyResult<Engine> {
        let mut o = Options::new(options);
        let (view_size, shuffle_length, timeout_s, period_s, refill, layer_bytes) = (
            o.usize("view_size")?, o.usize("shuffle_length")?, o.f64("timeout_s")?, o.f64("period_s")?,
            o.bool("refill")?, o.u64("layer_bytes")?,
        );
        o.done()?;
        let (delay_ms, jitter_ms, loss, partitioned) = link_options(link)?;
        if shuffle_length < 1 || shuffle_length > view_size {
            return Err(PyValueError::new_err("need 1 <= shuffle_length <= view_size"));
        }
        Ok(Engine {
            cyclon: Cyclon { view_size, shuffle_length, refill }, timeout_s, period_s, layer_bytes, tpl_node: Vec::new(),
            tpl_profile: Vec::new(),
            link_delay_ms: delay_ms, link_jitter_ms: jitter_ms, link_loss: loss, link_partitioned: partitioned,
            link_rng: Mt::from_state(&link_rng)?, nodes: (0..nodes).map(|_| None).collect(),
            queue: BinaryHeap::new(), msgs: Vec::new(), free_msgs: Vec::new(),
            now: 0.0, steps: 0, seq: 0, frozen_s: 0.0, drawn: Vec::new(), scratch: Scratch::default(),
            diverge_at: std::env::var("OVERLAYLAB_NATIVE_DIVERGE_AT_S").ok().and_then(|v| v.parse().ok()),
        })
    }

    /// More descriptor templates (numbered on from those before): node id and encoded
    /// profile size of each.
    fn add_templates(&mut self, node_ids: Vec<u32>, profiles: Vec<u64>) -> PyResult<()> {
        if node_ids.len() != profiles.len() {
            return Err(PyValueError::new_err("one profile size per template"));
        }
        self.tpl_node.extend(node_ids);
        self.tpl_profile.extend(profiles);
        Ok(())
    }

    /// Node `i`'s state: `pending` as (partner, deadline, kept ids), `rng` as getstate()[1].
    #[allow(clippy::too_many_arguments)]
    fn add_node(
        &mut self, i: usize, me: u32, alive: bool, view: Vec<(u32, u32)>, reserve: Vec<(u32, u32)>,
        pending: Vec<(u32, f64, Vec<u32>)>, late: u64, rng: Vec<u64>, timer: Option<f64>,
    ) -> PyResult<()> {
        let pending = pending.into_iter().map(|(partner, deadline, kept)| Pending { partner, deadline, kept }).collect();
        let node = Node {
            id: i as u32, me, alive, view: entries(&self.tpl_node, view), reserve: entries(&self.tpl_node, reserve), pending, late, rng: Mt::from_state(&rng)?, timer,
            stats: Vec::new(),
        };
        *self.nodes.get_mut(i).ok_or_else(|| PyValueError::new_err("node id out of range"))? = Some(node);
        Ok(())
    }

    fn set_clock(&mut self, now: f64, steps: u64, seq: u64, frozen_s: f64) {
        (self.now, self.steps, self.seq, self.frozen_s) = (now, steps, seq, frozen_s);
    }

    /// `Simulation.start_node` on node `i` (not alive; its state is kept: a first join or a
    /// rejoin with `resume`) and `Stack.start`: `Cyclon.bootstrap` (the contacts, templates,
    /// merged at age 0 and, with `refill`, kept in the reserve), then the first tick at
    /// `now + uniform(0, period)`.
    fn start_node(&mut self, i: u32, contacts: Vec<u32>) -> PyResult<()> {
        if self.nodes.get(i as usize).and_then(Option::as_ref).is_none_or(|n| n.alive) {
            return Err(PyValueError::new_err(format!("node {i} is not a stopped node of the engine")));
        }
        if contacts.iter().any(|&t| t as usize >= self.tpl_node.len()) {
            return Err(PyValueError::new_err("an unknown template"));
        }
        let entries = entries(&self.tpl_node, contacts.into_iter().map(|t| (t, 0)).collect());
        let (now, period) = (self.now, self.period_s);
        let mut scratch = std::mem::take(&mut self.scratch);
        let node = self.nodes[i as usize].as_mut().expect("a node the engine holds");
        node.alive = true;
        self.cyclon.merge(&mut node.view, node.id, &entries, &[], &mut scratch);
        if self.cyclon.refill {
            for d in entries {
                self.cyclon.keep(&mut node.reserve, d);
            }
        }
        self.scratch = scratch;
        let node = self.node(i);
        let at = now + (0.0 + (period - 0.0) * node.rng.random());
        node.timer = Some(at);
        self.push(at, TIMER, i as u64);
        Ok(())
    }

    /// `Simulation.stop_node`: node `i` crashes or has left; its timer is cancelled, messages
    /// to it are lost from now on; its state stays.
    fn stop_node(&mut self, i: u32) -> PyResult<()> {
        let node = self.nodes.get_mut(i as usize).and_then(Option::as_mut)
            .ok_or_else(|| PyValueError::new_err(format!("node {i} is not a node of the engine")))?;
        node.alive = false;
        node.timer = None;
        Ok(())
    }

    /// Queue entries handed over with their own (time, seq).
    fn put_timer(&mut self, at: f64, seq: u64, node: u32) {
        self.queue.push(Due { at, seq, kind: TIMER, data: node as u64 });
    }

    #[allow(clippy::too_many_arguments)]
    fn put_msg(&mut self, at: f64, seq: u64, src: u32, dst: u32, reply: bool, sender: u32, list: Vec<(u32, u32)>) {
        let slot = self.new_msg(src, dst, reply, sender);
        self.msgs[slot].entries = entries(&self.tpl_node, list);
        self.queue.push(Due { at, seq, kind: MSG, data: slot as u64 });
    }

    fn put_call(&mut self, at: f64, seq: u64, handle: u64) {
        self.queue.push(Due { at, seq, kind: CALL, data: handle });
    }

    /// `Simulation.call_at`: a new call, numbered here; returns its seq.
    fn call_at(&mut self, at: f64, handle: u64) -> u64 {
        self.push(at, CALL, handle);
        self.seq
    }

    fn run_until(&mut self, t_end: f64, max_steps: u64) -> PyResult<Option<u64>> {
        run_until(self, t_end, max_steps)
    }

    fn settle(&mut self) {
        settle(self)
    }

    /// Node `i`'s CYCLON view, node ids in view order (a snapshot).
    fn view_ids(&self, i: usize) -> Vec<u32> {
        let node = self.nodes[i].as_ref().expect("a node the engine does not hold");
        node.view.iter().map(|d| d.id).collect()
    }

    /// Node `i`'s state, as `add_node` takes it, with its counters in order of first use
    /// (key numbers: messages sent, bytes sent, dropped by the link, lost to a dead peer). The
    /// engine lets go of the node (the state is being handed back, node by node, so that the
    /// two copies never coexist whole).
    #[allow(clippy::type_complexity)]
    fn take_node(
        &mut self, i: usize,
    ) -> PyResult<(Vec<(u32, u32)>, Vec<(u32, u32)>, Vec<(u32, f64, Vec<u32>)>, u64, Vec<u64>, Option<f64>, Vec<(u8, u64)>)> {
        let n = self.nodes.get_mut(i).and_then(Option::take).ok_or_else(|| PyValueError::new_err("a node the engine does not hold"))?;
        let pending = n.pending.into_iter().map(|p| (p.partner, p.deadline, p.kept)).collect();
        Ok((pairs(&n.view), pairs(&n.reserve), pending, n.late, n.rng.to_state(), n.timer, n.stats))
    }

    /// The queue: (at, seq, kind, data) with kind 0 timer (data: node), 1 message (data: src,
    /// dst, reply, sender, entries), 2 call (data: handle); in no particular order.
    #[allow(clippy::type_complexity)]
    fn queue(&self, py: Python<'_>) -> PyResult<Vec<(f64, u64, u8, Py<PyAny>)>> {
        let mut out = Vec::with_capacity(self.queue.len());
        for due in self.queue.iter() {
            let data = match due.kind {
                MSG => {
                    let m = &self.msgs[due.data as usize];
                    (m.src, m.dst, m.reply, m.sender, pairs(&m.entries)).into_pyobject(py)?.into_any().unbind()
                }
                _ => due.data.into_pyobject(py)?.into_any().unbind(),
            };
            out.push((due.at, due.seq, due.kind, data));
        }
        Ok(out)
    }

    fn link_rng(&self) -> Vec<u64> {
        self.link_rng.to_state()
    }
}

/// Python's random draws, for tests: `random()` n times from a state.
/// The link, one rule for every destination, by name: `delay_ms` (a constant base delay
/// folded in), `jitter_ms`, `loss`, `partitioned`.
pub(crate) fn link_options(link: Bound<'_, PyDict>) -> PyResult<(f64, f64, f64, bool)> {
    let mut o = Options::new(link);
    let link = (o.f64("delay_ms")?, o.f64("jitter_ms")?, o.f64("loss")?, o.bool("partitioned")?);
    o.done()?;
    Ok(link)
}

#[pyfunction]
fn mt_randoms(state: Vec<u64>, n: usize) -> PyResult<Vec<f64>> {
    let mut mt = Mt::from_state(&state)?;
    Ok((0..n).map(|_| mt.random()).collect())
}

/// `sample(range(population), k)` from a state, for tests; returns the sample and the new state.
#[pyfunction]
fn mt_sample(state: Vec<u64>, population: usize, k: usize) -> PyResult<(Vec<usize>, Vec<u64>)> {
    let mut mt = Mt::from_state(&state)?;
    let pop: Vec<usize> = (0..population).collect();
    let (mut out, mut pool) = (Vec::new(), Vec::new());
    mt.sample(&pop, k, &mut out, &mut pool);
    Ok((out, mt.to_state()))
}

/// The fingerprints of the Python code these loops were verified against (node/sim/mirror.py),
/// embedded when the extension is built.
#[pyfunction]
fn verified() -> &'static str {
    include_str!("../verified.json")
}

#[pymodule]
fn overlaylab_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(verified, m)?)?;
    m.add_class::<Engine>()?;
    m.add_class::<poldercast::PolderEngine>()?;
    m.add_function(wrap_pyfunction!(mt_randoms, m)?)?;
    m.add_function(wrap_pyfunction!(mt_sample, m)?)?;
    Ok(())
}
