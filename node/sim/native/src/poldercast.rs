//! The simulator's PolderCast loop, compiled: `node/sim/engine.py`'s event loop carrying a
//! `node/protocols/poldercast/protocol.py` stack (CYCLON, VICINITY and RINGS, each with its own timer, and
//! RingCast: publications, deliveries and their span records) on every node, step for step,
//! byte-identical to the Python cores (`node/sim/native.py` hands the state over and back;
//! tests/unit/test_native.py compares the two on the same seeds).
//!
//! It follows the Python code line by line; what it does differently is only how values are
//! held, never what is drawn or in which order:
//! - a node's topics never change here (the hand-over refuses a descriptor whose topics are not
//!   its node's), so a descriptor is a node id, an age and a shared `Profile` (the node's topic
//!   priorities);
//! - topics are numbers (the most subscribed first), and `sorted(holes)` sorts by their names' order;
//! - RINGS's priorities are kept per topic: the order of a profile's priorities, which Python
//!   builds in set order, is never observed (sizes and ranks are sums and maxima over them);
//! - views are vectors in dict order with Python's rules (a deleted key leaves its place, a new
//!   one goes last, an update stays put); the RINGS view, thousands of entries for a heavy
//!   subscriber, is an ordered map.

use crate::cyclon::{age_all, expect, pick_oldest, take, Cyclon, Pending, Scratch, ViewEntry};
use crate::options::Options;
use crate::{run_until, settle, varint_len, Due, EventLoop, Mt, CALL, MSG, TIMER};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::rc::Rc;

const CYC: usize = 0;
const VIC: usize = 1;
const RING: usize = 2;
/// Counter keys: 2 * layer (messages sent), 2 * layer + 1 (bytes sent), then these.
const DROPPED_BY_LINK: u8 = 6;
const LOST_TO_DEAD_PEER: u8 = 7;
const EVENTS_PUBLISHED: u8 = 8;
const EVENTS_RECEIVED: u8 = 9;
const DUPLICATES: u8 = 10;
const EVENTS_SENT: u8 = 11;
/// `Msg.layer` of an event copy.
const EVENT: usize = 3;

/// A profile as a descriptor carries it: the node and its non-zero topic priorities (by topic
/// number), with its encoded size.
struct Profile {
    node: u32,
    prio: Vec<(u32, u32)>,
    size: u64,
}

fn same_profile(a: &Rc<Profile>, b: &Rc<Profile>) -> bool {
    Rc::ptr_eq(a, b) || a.prio == b.prio
}

#[derive(Clone)]
struct Entry {
    id: u32,
    age: u32,
    prof: Rc<Profile>,
}

impl Entry {
    fn aged(&self, age: u32) -> Entry {
        Entry { id: self.id, age, prof: self.prof.clone() }
    }
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

#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("ids hash as u32")
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = (n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A Python dict of descriptors by node id, in insertion order.
#[derive(Default)]
struct ODict {
    slots: Vec<Option<Entry>>,
    index: HashMap<u32, usize, BuildHasherDefault<IdHasher>>,
}

impl ODict {
    fn len(&self) -> usize {
        self.index.len()
    }
    fn get(&self, id: u32) -> Option<&Entry> {
        self.index.get(&id).map(|&i| self.slots[i].as_ref().expect("an indexed slot"))
    }
    fn contains(&self, id: u32) -> bool {
        self.index.contains_key(&id)
    }
    fn insert(&mut self, e: Entry) {
        match self.index.get(&e.id) {
            Some(&i) => self.slots[i] = Some(e),
            None => {
                self.index.insert(e.id, self.slots.len());
                self.slots.push(Some(e));
            }
        }
    }
    fn remove(&mut self, id: u32) -> Option<Entry> {
        let i = self.index.remove(&id)?;
        let e = self.slots[i].take();
        if self.slots.len() > 32 && self.index.len() * 2 < self.slots.len() {
            self.slots.retain(Option::is_some);
            for (i, e) in self.slots.iter().enumerate() {
                self.index.insert(e.as_ref().expect("kept").id, i);
            }
        }
        e
    }
    fn iter(&self) -> impl Iterator<Item = &Entry> + Clone {
        self.slots.iter().flatten()
    }
    fn iter_mut(&mut self) -> impl Iterator<Item = &mut Entry> {
        self.slots.iter_mut().flatten()
    }
}

/// Marks over node or topic numbers, reset in O(1) by a new generation.
struct Marks {
    gen: u32,
    mark: Vec<u32>,
    val: Vec<u32>,
}

impl Marks {
    fn new(n: usize) -> Marks {
        Marks { gen: 0, mark: vec![0; n], val: vec![0; n] }
    }
    fn reset(&mut self) {
        self.gen += 1;
        if self.gen == u32::MAX {
            self.mark.iter_mut().for_each(|m| *m = 0);
            self.gen = 1;
        }
    }
    fn set(&mut self, k: u32, v: u32) {
        self.mark[k as usize] = self.gen;
        self.val[k as usize] = v;
    }
    fn get(&self, k: u32) -> Option<u32> {
        (self.mark[k as usize] == self.gen).then(|| self.val[k as usize])
    }
    fn has(&self, k: u32) -> bool {
        self.mark[k as usize] == self.gen
    }
}

/// Ranking keys by candidate node (0: no shared topic).
type Keys = HashMap<u32, u64, BuildHasherDefault<IdHasher>>;
const MAX_OWN_KEYS: usize = 4096;

struct Node {
    alive: bool,
    me: Rc<Profile>,
    rng: Mt,
    timers: [Option<f64>; 3],
    late: [u64; 3],
    cyc_view: Vec<Entry>,
    reserve: Vec<Entry>,
    cyc_pending: Vec<Pending<Vec<u32>>>,
    vic_view: Vec<Entry>,
    vic_pending: Vec<Pending<()>>,
    ring_view: ODict,
    /// RINGS's succ/pred dicts' keys, as positions in the node's topics, in dict order.
    order: Vec<u32>,
    in_order: Vec<bool>,
    succ: Vec<Vec<u32>>,
    pred: Vec<Vec<u32>>,
    holes: Vec<u32>,
    /// RINGS's `_prio`, by position in the node's topics (0: none).
    prio: Vec<u32>,
    considered: Vec<u32>,
    ring_pending: Vec<Pending<bool>>,
    /// The duplicate filter (event numbers, oldest first) and the events published.
    seen: VecDeque<u32>,
    seen_set: HashSet<u32, BuildHasherDefault<IdHasher>>,
    published: u64,
    /// VICINITY's ranking keys of candidates for the node's own profile (`Vicinity._keys_for_me`).
    own_keys: Option<(Rc<Profile>, Keys)>,
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

/// A layer's exchange, or (layer `EVENT`) an event copy: its event, hops and the span it
/// leaves under (`sender` is then the source's profile, unused).
struct Msg {
    src: u32,
    dst: u32,
    layer: usize,
    reply: bool,
    sender: Entry,
    entries: Vec<Entry>,
    event: u32,
    hops: u32,
    span: u64,
}

/// A span record (`Simulation.span`): `parent` and `src` 0 for none (span numbers and
/// node ids + 1 otherwise).
struct Span {
    seq: u64,
    parent: u64,
    publish: bool,
    at: f64,
    node: u32,
    src: u64,
    event: u32,
    hops: u32,
    first: bool,
    subscriber: bool,
}

struct Config {
    cyclon: Cyclon,
    vic_view: usize,
    vic_gossip: usize,
    ring_size: usize,
    ring_gossip: usize,
    period: [f64; 3],
    timeout: [f64; 3],
    layer_bytes: [u64; 3],
    max_mode: bool,
    removal_on_timeout: bool,
    nearest_first: bool,
    fanout: usize,
    shortcuts: (bool, bool),
    seen_capacity: usize,
    ring_failover: bool,
}

/// The PolderCast overlay of a whole simulation. See `node/sim/native.py` for its use.
#[pyclass(module = "overlaylab_native", unsendable)]
pub(crate) struct PolderEngine {
    cfg: Config,
    /// Per node: its topics (sorted numbers), as a bitset, and its profile's size but the
    /// priorities; per topic: the bytes of its field in a TopicPriority; per node: its ring id.
    topics: Vec<Vec<u32>>,
    bits: Vec<Vec<u64>>,
    base_size: Vec<u64>,
    topic_bytes: Vec<u64>,
    /// Per topic number, the topic's place in the topics' sorted order (numbers go by
    /// popularity, so that most tests of a light subscriber's topics fall in the first words of
    /// a heavy subscriber's bitset).
    topic_rank: Vec<u32>,
    rid: Vec<u64>,
    link_delay_ms: f64,
    link_jitter_ms: f64,
    link_loss: f64,
    link_partitioned: bool,
    link_rng: Mt,
    nodes: Vec<Option<Node>>,
    queue: BinaryHeap<Due>,
    msgs: Vec<Option<Msg>>,
    free_msgs: Vec<usize>,
    #[pyo3(get)]
    now: f64,
    #[pyo3(get)]
    steps: u64,
    #[pyo3(get)]
    seq: u64,
    #[pyo3(get)]
    frozen_s: f64,
    node_marks: Marks,
    topic_marks: Marks,
    topic_marks2: Marks,
    /// Per event number: its topic (events published elsewhere: none).
    event_topic: Vec<u32>,
    #[pyo3(get)]
    span_seq: u64,
    spans: Vec<Span>,
    /// Profiles handed in (`add_profile`) and out (`take_node` numbers them).
    handed_in: Vec<Rc<Profile>>,
    handed_out: HashMap<*const Profile, u32>,
    out_profiles: Vec<Rc<Profile>>,
    cyc_scratch: Scratch,
}

fn has_bit(bits: &[u64], t: u32) -> bool {
    bits[(t >> 6) as usize] >> (t & 63) & 1 == 1
}

fn field_len(n: u64) -> u64 {
    1 + varint_len(n) + n
}

impl PolderEngine {
    fn node(&mut self, i: u32) -> &mut Node {
        self.nodes[i as usize].as_mut().expect("a node the engine does not hold")
    }

    fn nd(&self, i: u32) -> &Node {
        self.nodes[i as usize].as_ref().expect("a node the engine does not hold")
    }

    fn push(&mut self, at: f64, kind: u8, data: u64) {
        self.seq += 1;
        self.queue.push(Due { at, seq: self.seq, kind, data });
    }

    fn profile(&self, node: u32, prio: Vec<(u32, u32)>) -> Rc<Profile> {
        let mut size = self.base_size[node as usize];
        for &(t, p) in &prio {
            size += field_len(self.topic_bytes[t as usize] + if p > 0 { 1 + varint_len(p as u64) } else { 0 });
        }
        Rc::new(Profile { node, prio, size })
    }

    fn me(&self, i: u32) -> Entry {
        Entry { id: i, age: 0, prof: self.nd(i).me.clone() }
    }

    fn wire_size(&self, msg: &Msg) -> u64 {
        let mut size = self.cfg.layer_bytes[msg.layer] + if msg.reply { 2 } else { 0 };
        for d in std::iter::once(&msg.sender).chain(msg.entries.iter()) {
            let mut n = d.prof.size;
            if d.age > 0 {
                n += if d.age < 128 { 2 } else { 1 + varint_len(d.age as u64) };
            }
            size += n + if n < 128 { 2 } else { 1 + varint_len(n) };
        }
        size
    }

    /// `Simulation.send`: count the message, apply the link, schedule its delivery.
    fn send(&mut self, src: u32, dst: u32, layer: usize, reply: bool, entries: Vec<Entry>) {
        let msg = Msg { src, dst, layer, reply, sender: self.me(src), entries, event: 0, hops: 0, span: 0 };
        let size = self.wire_size(&msg);
        let node = self.node(src);
        node.count(2 * layer as u8, 1);
        node.count(2 * layer as u8 + 1, size);
        if self.dropped() {
            self.node(src).count(DROPPED_BY_LINK, 1);
            return;
        }
        let at = self.now + self.delay();
        let slot = self.put(msg);
        self.push(at, MSG, slot as u64);
    }

    fn put(&mut self, msg: Msg) -> usize {
        match self.free_msgs.pop() {
            Some(slot) => {
                self.msgs[slot] = Some(msg);
                slot
            }
            None => {
                self.msgs.push(Some(msg));
                self.msgs.len() - 1
            }
        }
    }

    /// `Stack.union`: every view but `without`'s merged (views in the order CYCLON, VICINITY,
    /// RINGS), the youngest copy of each node, an earlier view's on a tie.
    fn union(&mut self, i: u32, without: Option<usize>) -> Vec<Entry> {
        let node = self.nodes[i as usize].as_ref().expect("a node the engine does not hold");
        let marks = &mut self.node_marks;
        marks.reset();
        let mut best: Vec<Entry> = Vec::new();
        let mut add = |best: &mut Vec<Entry>, d: &Entry, tie_wins: bool| match marks.get(d.id) {
            Some(at) => {
                let old = &mut best[at as usize];
                if d.age < old.age || (tie_wins && d.age == old.age) {
                    *old = d.clone();
                }
            }
            None => {
                marks.set(d.id, best.len() as u32);
                best.push(d.clone());
            }
        };
        if without != Some(RING) {
            for d in node.ring_view.iter() {
                add(&mut best, d, true);
            }
            if without != Some(VIC) {
                for d in &node.vic_view {
                    add(&mut best, d, true);
                }
            }
        } else {
            for d in &node.vic_view {
                add(&mut best, d, true);
            }
        }
        if without != Some(CYC) {
            for d in &node.cyc_view {
                add(&mut best, d, true);
            }
        }
        best
    }

    /// `vicinity.rank`: the k candidates best for the target (node `tid` with `prof`'s
    /// priorities): highest priority of a shared topic (max or sum), then most shared topics,
    /// then at random (whole groups shuffled, the group that does not fit sampled). `keys`: each
    /// candidate's key for this target, kept by a caller that ranks for it again.
    #[allow(clippy::too_many_arguments)]
    fn rank(&mut self, i: u32, tid: u32, prof: &Profile, candidates: &[Entry], k: usize, mut keys: Option<&mut Keys>) -> Vec<Entry> {
        let marks = &mut self.topic_marks;
        marks.reset();
        for &(t, p) in &prof.prio {
            marks.set(t, p);
        }
        let (marks, max_mode) = (&self.topic_marks, self.cfg.max_mode);
        let (tt, tb) = (&self.topics[tid as usize], &self.bits[tid as usize]);
        // Two heavy subscribers: their shared topics by bitset, the priority by the target's
        // levels (highest first), built on first need.
        let words = tb.len();
        let mut levels: Vec<(u64, Vec<u64>)> = Vec::new();
        let mut keyed: Vec<(u64, u32)> = Vec::with_capacity(candidates.len());
        for (ix, c) in candidates.iter().enumerate() {
            if c.id == tid {
                continue;
            }
            if let Some(key) = keys.as_ref().and_then(|keys| keys.get(&c.id)) {
                if *key > 0 {
                    keyed.push((*key, ix as u32));
                }
                continue;
            }
            let (ct, cb) = (&self.topics[c.id as usize], &self.bits[c.id as usize]);
            let (mut n, mut first) = (0u64, 0u64);
            if 4 * ct.len().min(tt.len()) > words {
                n = tb.iter().zip(cb.iter()).map(|(a, b)| (a & b).count_ones() as u64).sum();
                if n > 0 && max_mode {
                    if levels.is_empty() && !prof.prio.is_empty() {
                        let mut ps: Vec<u32> = prof.prio.iter().map(|&(_, p)| p).collect();
                        ps.sort_unstable_by(|a, b| b.cmp(a));
                        ps.dedup();
                        levels = ps.iter().map(|&p| (p as u64, vec![0u64; words])).collect();
                        for &(t, p) in &prof.prio {
                            let level = &mut levels.iter_mut().find(|(q, _)| *q == p as u64).expect("a level").1;
                            level[(t >> 6) as usize] |= 1 << (t & 63);
                        }
                    }
                    first = levels
                        .iter()
                        .find(|(_, level)| level.iter().zip(cb.iter()).any(|(a, b)| a & b != 0))
                        .map_or(0, |&(p, _)| p);
                } else if n > 0 {
                    first = prof.prio.iter().filter(|&&(t, _)| has_bit(cb, t)).map(|&(_, p)| p as u64).sum();
                }
            } else {
                let mut shared = |t: u32| {
                    n += 1;
                    if let Some(p) = marks.get(t) {
                        first = if max_mode { first.max(p as u64) } else { first + p as u64 };
                    }
                };
                if ct.len() <= tt.len() {
                    ct.iter().filter(|&&t| has_bit(tb, t)).for_each(|&t| shared(t));
                } else {
                    tt.iter().filter(|&&t| has_bit(cb, t)).for_each(|&t| shared(t));
                }
            }
            let key = if n > 0 { (first << 32) | n } else { 0 };
            if let Some(keys) = keys.as_mut() {
                keys.insert(c.id, key);
            }
            if key > 0 {
                keyed.push((key, ix as u32));
            }
        }
        keyed.sort_unstable_by_key(|&(key, ix)| (std::cmp::Reverse(key), ix)); // ix: candidate order in a group
        let rng = &mut self.nodes[i as usize].as_mut().expect("a node the engine does not hold").rng;
        let mut best: Vec<Entry> = Vec::with_capacity(k);
        let (mut group, mut drawn, mut pool) = (Vec::new(), Vec::new(), Vec::new());
        let mut s = 0;
        while s < keyed.len() {
            let key = keyed[s].0;
            let mut e = s;
            group.clear();
            while e < keyed.len() && keyed[e].0 == key {
                group.push(keyed[e].1);
                e += 1;
            }
            let room = k - best.len();
            if group.len() > room {
                rng.sample(&group, room, &mut drawn, &mut pool);
                best.extend(drawn.iter().map(|&ix| candidates[ix as usize].clone()));
                break;
            }
            rng.shuffle(&mut group);
            best.extend(group.iter().map(|&ix| candidates[ix as usize].clone()));
            s = e;
        }
        best
    }

    /// Whether node `x` subscribes to one of the topics of `list` marked in `marks`.
    fn shares(&self, x: u32, list: &[u32], marks: &Marks) -> bool {
        let xt = &self.topics[x as usize];
        if xt.len() <= list.len() {
            xt.iter().any(|&t| marks.has(t))
        } else {
            let xb = &self.bits[x as usize];
            list.iter().any(|&t| marks.has(t) && has_bit(xb, t))
        }
    }

    /// The topics of node `x` among those of `list` marked in `marks`, in no particular order.
    fn common(&self, x: u32, list: &[u32], marks: &Marks, out: &mut Vec<u32>) {
        out.clear();
        let xt = &self.topics[x as usize];
        if xt.len() <= list.len() {
            out.extend(xt.iter().copied().filter(|&t| marks.has(t)));
        } else {
            let xb = &self.bits[x as usize];
            out.extend(list.iter().copied().filter(|&t| marks.has(t) && has_bit(xb, t)));
        }
    }

    fn distance(&self, x: u32, center: u64, succ: bool) -> u64 {
        let r = self.rid[x as usize];
        if succ {
            r.wrapping_sub(center)
        } else {
            center.wrapping_sub(r)
        }
    }

    // --- CYCLON ---------------------------------------------------------------------------------

    fn cyc_tick(&mut self, i: u32) {
        if self.nd(i).cyc_view.is_empty() && self.cfg.cyclon.refill {
            let others = self.union(i, Some(CYC));
            let node = self.nodes[i as usize].as_mut().expect("a node the engine holds");
            if others.is_empty() {
                self.cfg.cyclon.refill(&mut node.cyc_view, node.reserve.iter().rev().cloned());
            } else {
                self.cfg.cyclon.refill(&mut node.cyc_view, others);
            }
        }
        if self.nd(i).cyc_view.is_empty() {
            return;
        }
        let deadline = self.now + self.cfg.timeout[CYC];
        let (mut sent, mut scratch) = (Vec::new(), std::mem::take(&mut self.cyc_scratch));
        let node = self.nodes[i as usize].as_mut().expect("a node the engine holds");
        age_all(node.cyc_view.iter_mut());
        let q = self.cfg.cyclon.exchange(&mut node.cyc_view, &mut node.reserve, &mut node.rng, &mut sent, &mut scratch);
        expect(&mut node.cyc_pending, q.id, deadline, sent.iter().map(|d| d.id).collect());
        self.cyc_scratch = scratch;
        let mut entries = vec![self.me(i)];
        entries.extend(sent);
        self.send(i, q.id, CYC, false, entries);
    }

    fn cyc_deliver(&mut self, src: u32, dst: u32, reply: bool, entries: Vec<Entry>) {
        let now = self.now;
        let mut scratch = std::mem::take(&mut self.cyc_scratch);
        let node = self.nodes[dst as usize].as_mut().expect("a node the engine holds");
        if reply {
            if let Some(kept) = take(&mut node.cyc_pending, src, now, &mut node.late[CYC]) {
                self.cfg.cyclon.merge(&mut node.cyc_view, dst, &entries, &kept, &mut scratch);
            }
            self.cyc_scratch = scratch;
            return;
        }
        let mut answer = Vec::new();
        self.cfg.cyclon.answer(&node.cyc_view, src, &mut node.rng, &mut answer, &mut scratch);
        let ids: Vec<u32> = answer.iter().map(|d| d.id).collect();
        self.cfg.cyclon.merge(&mut node.cyc_view, dst, &entries, &ids, &mut scratch);
        self.cyc_scratch = scratch;
        self.send(dst, src, CYC, true, answer);
    }

    // --- VICINITY -------------------------------------------------------------------------------

    fn vic_tick(&mut self, i: u32) {
        let node = self.node(i);
        node.vic_view.iter_mut().for_each(|d| d.age += 1);
        let q = if !node.vic_view.is_empty() {
            let pick = pick_oldest(node.vic_view.iter(), &mut node.rng);
            node.vic_view.remove(pick)
        } else if !node.cyc_view.is_empty() {
            let pick = node.rng.randbelow(node.cyc_view.len());
            node.cyc_view[pick].clone()
        } else {
            return;
        };
        let union = self.union(i, None);
        let entries = self.rank(i, q.id, &q.prof, &union, self.cfg.vic_gossip, None);
        let deadline = self.now + self.cfg.timeout[VIC];
        expect(&mut self.node(i).vic_pending, q.id, deadline, ());
        self.send(i, q.id, VIC, false, entries);
    }

    /// `Vicinity._merge`.
    fn vic_merge(&mut self, i: u32, sender: &Entry, entries: &[Entry]) {
        let mut pool = self.union(i, None);
        let marks = &mut self.node_marks; // still marking the union's positions
        for d in entries.iter().chain(std::iter::once(sender)) {
            match marks.get(d.id) {
                Some(at) => {
                    if d.age < pool[at as usize].age {
                        pool[at as usize] = d.clone();
                    }
                }
                None => {
                    marks.set(d.id, pool.len() as u32);
                    pool.push(d.clone());
                }
            }
        }
        pool.retain(|d| d.id != i);
        let node = self.node(i);
        let me = node.me.clone();
        let mut keys = match node.own_keys.take() {
            Some((of, keys)) if Rc::ptr_eq(&of, &me) && keys.len() < MAX_OWN_KEYS => keys,
            _ => Keys::default(),
        };
        let ranked = self.rank(i, i, &me, &pool, self.cfg.vic_view, Some(&mut keys));
        self.node(i).own_keys = Some((me, keys));
        let node = self.node(i);
        let view: Vec<Entry> = ranked
            .into_iter()
            .map(|d| {
                if d.id == sender.id {
                    return sender.clone();
                }
                match node.vic_view.iter().find(|m| m.id == d.id) {
                    Some(mine) if mine.age != d.age => d.aged(mine.age),
                    _ => d,
                }
            })
            .collect();
        node.vic_view = view;
    }

    fn vic_deliver(&mut self, src: u32, dst: u32, reply: bool, sender: Entry, entries: Vec<Entry>) {
        let sender = sender.aged(0);
        if reply {
            let now = self.now;
            let node = self.node(dst);
            if take(&mut node.vic_pending, src, now, &mut node.late[VIC]).is_some() {
                self.vic_merge(dst, &sender, &entries);
            }
            return;
        }
        self.vic_merge(dst, &sender, &entries);
        let mut candidates = self.union(dst, None);
        candidates.retain(|d| !entries.iter().any(|e| e.id == d.id));
        let answer = self.rank(dst, sender.id, &sender.prof, &candidates, self.cfg.vic_gossip, None);
        self.send(dst, src, VIC, true, answer);
    }

    // --- RINGS ----------------------------------------------------------------------------------

    fn pos(&self, i: u32, t: u32) -> usize {
        self.topics[i as usize].binary_search(&t).expect("a topic of the node")
    }

    fn ring_tick(&mut self, i: u32) {
        let now = self.now;
        let node = self.node(i);
        let mut expired = Vec::new();
        node.ring_pending.retain(|p| {
            if p.deadline <= now {
                expired.push((p.partner, p.kept));
                false
            } else {
                true
            }
        });
        for (partner, kept) in expired {
            if kept && self.cfg.removal_on_timeout && self.nd(i).ring_view.contains(partner) {
                self.ring_drop(i, partner);
            }
        }
        self.node(i).ring_view.iter_mut().for_each(|d| d.age += 1);
        self.recompute(i, &[], None);
        let removal_on_timeout = self.cfg.removal_on_timeout;
        let node = self.node(i);
        let (q, kept) = if node.ring_view.len() > 0 {
            let pick = pick_oldest(node.ring_view.iter(), &mut node.rng);
            let oldest = node.ring_view.iter().nth(pick).expect("picked").clone();
            if removal_on_timeout {
                (oldest, true)
            } else {
                (self.ring_drop(i, oldest.id), true)
            }
        } else {
            let marks = &mut self.topic_marks;
            marks.reset();
            self.topics[i as usize].iter().for_each(|&t| marks.set(t, 0));
            let node = self.nd(i);
            let source = if node.vic_view.is_empty() { &node.cyc_view } else { &node.vic_view };
            let mine = &self.topics[i as usize];
            let sharing: Vec<Entry> = source.iter().filter(|d| self.shares(d.id, mine, &self.topic_marks)).cloned().collect();
            if sharing.is_empty() {
                return;
            }
            let pick = self.node(i).rng.randbelow(sharing.len());
            (sharing[pick].clone(), false)
        };
        let entries = self.ring_select(i, &q);
        let deadline = now + self.cfg.timeout[RING];
        expect(&mut self.node(i).ring_pending, q.id, deadline, kept);
        self.send(i, q.id, RING, false, entries);
    }

    fn ring_deliver(&mut self, src: u32, dst: u32, reply: bool, sender: Entry, entries: Vec<Entry>) {
        let fresh = sender.aged(0);
        let mut received = entries;
        if reply {
            let now = self.now;
            let node = self.node(dst);
            if take(&mut node.ring_pending, src, now, &mut node.late[RING]).is_some() {
                received.push(fresh);
                self.recompute(dst, &received, Some(sender.id));
            }
            return;
        }
        let answer = self.ring_select(dst, &fresh);
        received.push(fresh);
        self.recompute(dst, &received, Some(src));
        self.send(dst, src, RING, true, answer);
    }

    /// `Rings.select`: per common topic, the known subscribers just below and just above q's id.
    fn ring_select(&mut self, i: u32, q: &Entry) -> Vec<Entry> {
        let marks = &mut self.topic_marks;
        marks.reset();
        self.topics[i as usize].iter().for_each(|&t| marks.set(t, 0));
        let mut common = Vec::new();
        self.common(q.id, &self.topics[i as usize], &self.topic_marks, &mut common);
        common.sort_unstable();
        let marks = &mut self.topic_marks;
        marks.reset();
        common.iter().for_each(|&t| marks.set(t, 0));
        let union = self.union(i, None);
        let known: Vec<Entry> =
            union.into_iter().filter(|d| d.id != q.id && self.shares(d.id, &common, &self.topic_marks)).collect();
        let picked = self.nearest(&known, self.rid[q.id as usize], &common);
        let marks = &mut self.node_marks;
        marks.reset();
        let mut out: Vec<(u32, u32)> = Vec::new(); // (index in known, best rank)
        for (ix, r) in picked {
            let id = known[ix as usize].id;
            match marks.get(id) {
                Some(at) => out[at as usize].1 = out[at as usize].1.min(r),
                None => {
                    marks.set(id, out.len() as u32);
                    out.push((ix, r));
                }
            }
        }
        let g = self.cfg.ring_gossip;
        if out.len() > g {
            let rng = &mut self.nodes[i as usize].as_mut().expect("a node the engine does not hold").rng;
            if self.cfg.nearest_first {
                rng.shuffle(&mut out);
                out.sort_by_key(|&(_, r)| r);
                out.truncate(g);
            } else {
                let (mut drawn, mut pool) = (Vec::new(), Vec::new());
                rng.sample(&out, g, &mut drawn, &mut pool);
                out = drawn;
            }
        }
        out.into_iter().map(|(ix, _)| known[ix as usize].clone()).collect()
    }

    /// `Rings._nearest`: (index in members, best rank) for the ring_size/2 nearest members
    /// above `center` and below it on each topic of `topics` (marked in `topic_marks`).
    fn nearest(&mut self, members: &[Entry], center: u64, topics: &[u32]) -> Vec<(u32, u32)> {
        let half = (self.cfg.ring_size / 2) as u32;
        let mut picked = Vec::new();
        let mut shared = Vec::new();
        for succ in [true, false] {
            let mut room = std::mem::replace(&mut self.topic_marks2, Marks::new(0));
            room.reset();
            topics.iter().for_each(|&t| room.set(t, half));
            let mut unfilled = topics.len();
            let mut order: Vec<(u64, u32)> =
                members.iter().enumerate().map(|(ix, d)| (self.distance(d.id, center, succ), ix as u32)).collect();
            order.sort_by_key(|&(dist, _)| dist);
            for (_, ix) in order {
                self.common(members[ix as usize].id, topics, &self.topic_marks, &mut shared);
                let mut best = half;
                for &t in &shared {
                    let left = room.get(t).expect("a room per topic");
                    if left > 0 {
                        best = best.min(half - left);
                        room.set(t, left - 1);
                        if left == 1 {
                            unfilled -= 1;
                        }
                    }
                }
                if best < half {
                    picked.push((ix, best));
                    if unfilled == 0 {
                        break;
                    }
                }
            }
            self.topic_marks2 = room;
        }
        picked
    }

    /// `Rings.drop`: node x out of RINGS and every ring slot (their topics become holes).
    fn ring_drop(&mut self, i: u32, x: u32) -> Entry {
        let gone = self.node(i).ring_view.remove(x).expect("a RINGS neighbour");
        let marks = &mut self.topic_marks;
        marks.reset();
        self.topics[i as usize].iter().for_each(|&t| marks.set(t, 0));
        let mut shared = Vec::new();
        self.common(x, &self.topics[i as usize], &self.topic_marks, &mut shared);
        for t in shared {
            let p = self.pos(i, t);
            let node = self.node(i);
            for slots in [&mut node.succ[p], &mut node.pred[p]] {
                if let Some(at) = slots.iter().position(|&n| n == x) {
                    slots.remove(at);
                    node.holes.push(t);
                }
            }
        }
        gone
    }

    /// `Rings._place`: x into a nearest-first side if nearer than its farthest; true if it changed.
    fn place(&mut self, i: u32, p: usize, succ: bool, x: u32) -> bool {
        let half = self.cfg.ring_size / 2;
        let me = self.rid[i as usize];
        let distance = self.distance(x, me, succ);
        let rid = &self.rid;
        let node = self.nodes[i as usize].as_mut().expect("a node the engine does not hold");
        let slots = if succ { &mut node.succ[p] } else { &mut node.pred[p] };
        if slots.contains(&x) {
            return false;
        }
        let dist = |n: u32| if succ { rid[n as usize].wrapping_sub(me) } else { me.wrapping_sub(rid[n as usize]) };
        let mut at = slots.len();
        while at > 0 && dist(slots[at - 1]) > distance {
            at -= 1;
        }
        if at >= half {
            return false;
        }
        slots.insert(at, x);
        slots.truncate(half);
        true
    }

    /// `Rings.recompute` (see there: incremental, with the result of a full recompute).
    fn recompute(&mut self, i: u32, received: &[Entry], contact: Option<u32>) {
        let union = self.union(i, Some(RING));
        let mut newcomers: Vec<Entry> = Vec::new();
        {
            let node = self.nodes[i as usize].as_mut().expect("a node the engine does not hold");
            for d in union.iter().chain(received.iter()) {
                let x = d.id;
                if x == i {
                    continue;
                }
                if let Some(cur) = node.ring_view.get(x) {
                    if Some(x) == contact {
                        node.ring_view.insert(d.clone());
                    } else if d.age < cur.age && !same_profile(&d.prof, &cur.prof) {
                        let age = cur.age;
                        node.ring_view.insert(d.aged(age));
                    }
                } else {
                    match newcomers.iter().position(|n| n.id == x) {
                        Some(at) => {
                            if d.age < newcomers[at].age {
                                newcomers[at] = d.clone();
                            }
                        }
                        None => newcomers.push(d.clone()),
                    }
                }
            }
        }
        let node = self.nodes[i as usize].as_mut().expect("a node the engine does not hold");
        let mut holes = std::mem::take(&mut node.holes);
        holes.sort_unstable();
        holes.dedup();
        let by_name = &self.topic_rank;
        holes.sort_unstable_by_key(|&t| by_name[t as usize]); // Python's sorted(holes)
        let seen = std::mem::replace(&mut node.considered, newcomers.iter().map(|d| d.id).collect());
        for &t in &holes {
            let p = self.pos(i, t);
            let node = self.node(i);
            if !node.in_order[p] {
                node.in_order[p] = true;
                node.order.push(p as u32);
            }
        }
        if !holes.is_empty() {
            self.fill_holes(i, &holes, &newcomers);
        }
        // changed: the holes and the topics where a newcomer took a slot (marks over topics)
        let mut changed = holes.clone();
        let mut hole_marks = std::mem::replace(&mut self.topic_marks2, Marks::new(0));
        hole_marks.reset();
        holes.iter().for_each(|&t| hole_marks.set(t, 0));
        let marks = &mut self.topic_marks;
        marks.reset();
        self.topics[i as usize].iter().for_each(|&t| marks.set(t, 0));
        let mut shared = Vec::new();
        for d in &newcomers {
            if seen.contains(&d.id) {
                continue;
            }
            self.common(d.id, &self.topics[i as usize], &self.topic_marks, &mut shared);
            for &t in &shared {
                let mark = hole_marks.get(t); // 0: a hole, 1: changed already
                if mark == Some(0) {
                    continue;
                }
                let p = self.pos(i, t);
                let a = self.place(i, p, true, d.id);
                let b = self.place(i, p, false, d.id);
                if (a || b) && mark.is_none() {
                    hole_marks.set(t, 1);
                    changed.push(t);
                }
            }
        }
        self.topic_marks2 = hole_marks;
        if !changed.is_empty() {
            let node = self.nodes[i as usize].as_mut().expect("a node the engine does not hold");
            let mut view = ODict::default();
            for side in [&node.succ, &node.pred] {
                for &p in &node.order {
                    for &n in &side[p as usize] {
                        if view.contains(n) {
                            continue;
                        }
                        let d = match node.ring_view.get(n) {
                            Some(d) => d.clone(),
                            None => newcomers.iter().find(|d| d.id == n).expect("a slot's descriptor").clone(),
                        };
                        view.insert(d);
                    }
                }
            }
            node.ring_view = view;
        }
        self.refresh_priorities(i, &changed);
    }

    /// `Rings._fill_holes`: the slots of `holes` recomputed over the whole pool.
    fn fill_holes(&mut self, i: u32, holes: &[u32], newcomers: &[Entry]) {
        let half = self.cfg.ring_size / 2;
        let me = self.rid[i as usize];
        let marks = &mut self.topic_marks;
        marks.reset();
        holes.iter().for_each(|&t| marks.set(t, 0));
        let node = self.nd(i);
        let members: Vec<u32> = node
            .ring_view
            .iter()
            .chain(newcomers.iter())
            .filter(|d| self.shares(d.id, holes, &self.topic_marks))
            .map(|d| d.id)
            .collect();
        let positions: Vec<usize> = holes.iter().map(|&t| self.pos(i, t)).collect();
        let mut shared = Vec::new();
        for succ in [true, false] {
            let node = self.node(i);
            for &p in &positions {
                if succ { node.succ[p].clear() } else { node.pred[p].clear() }
            }
            let marks = &mut self.topic_marks; // the open topics
            marks.reset();
            holes.iter().for_each(|&t| marks.set(t, 0));
            let mut open = holes.len();
            let mut order: Vec<(u64, u32)> = members.iter().map(|&x| (self.distance(x, me, succ), x)).collect();
            order.sort_by_key(|&(dist, _)| dist);
            for (_, x) in order {
                self.common(x, holes, &self.topic_marks, &mut shared);
                for &t in &shared {
                    let p = self.pos(i, t);
                    let node = self.nodes[i as usize].as_mut().expect("a node the engine does not hold");
                    let slots = if succ { &mut node.succ[p] } else { &mut node.pred[p] };
                    slots.push(x);
                    if slots.len() == half {
                        self.topic_marks.mark[t as usize] = 0;
                        open -= 1;
                    }
                }
                if open == 0 {
                    break;
                }
            }
        }
    }

    /// `Rings._refresh_priorities` of `topics`: the profile is rebuilt when one changed.
    fn refresh_priorities(&mut self, i: u32, topics: &[u32]) {
        let size = self.cfg.ring_size as u32;
        let mut changed = false;
        for &t in topics {
            let p = self.pos(i, t);
            let node = self.node(i);
            let (succ, pred) = (&node.succ[p], &node.pred[p]);
            let disjoint = succ.iter().all(|n| !pred.contains(n));
            let distinct = succ.len() + pred.iter().filter(|n| !succ.contains(n)).count();
            let prio = if succ.len() + pred.len() >= size as usize && disjoint { 0 } else { size - size.min(distinct as u32) };
            if prio != node.prio[p] {
                node.prio[p] = prio;
                changed = true;
            }
        }
        if changed {
            let node = self.nd(i);
            let list: Vec<(u32, u32)> = self.topics[i as usize]
                .iter()
                .zip(node.prio.iter())
                .filter(|(_, &p)| p > 0)
                .map(|(&t, &p)| (t, p))
                .collect();
            let me = self.profile(i, list);
            self.node(i).me = me;
        }
    }

    // --- RingCast --------------------------------------------------------------------------------

    /// `RingCast.targets`: along the ring (the side the copy did not come from) and to random
    /// shortcuts of the shortcut views subscribed to the topic.
    fn targets(&mut self, i: u32, topic: u32, sender: Option<u32>) -> Vec<u32> {
        let p = self.pos(i, topic);
        let node = self.nd(i);
        let (succ, pred) = (node.succ[p].first().copied(), node.pred[p].first().copied());
        let f = self.cfg.fanout;
        let (ring, k) = match sender {
            Some(s) if Some(s) == succ => (vec![pred], f - 1),
            Some(s) if Some(s) == pred => (vec![succ], f - 1),
            _ => (vec![succ, pred], f - 2),
        };
        let mut targets: Vec<u32> = Vec::with_capacity(f);
        for n in ring.into_iter().flatten() {
            if !targets.contains(&n) {
                targets.push(n);
            }
        }
        let (cyclon, vicinity) = self.cfg.shortcuts;
        let views = [(cyclon, &node.cyc_view), (vicinity, &node.vic_view)];
        let mut pool: Vec<u32> = views
            .iter()
            .filter(|(on, _)| *on)
            .flat_map(|(_, view)| view.iter())
            .map(|d| d.id)
            .filter(|&x| x != i && Some(x) != sender && !targets.contains(&x) && has_bit(&self.bits[x as usize], topic))
            .collect();
        pool.sort_unstable();
        pool.dedup();
        if k > 0 {
            let (mut drawn, mut scratch) = (Vec::new(), Vec::new());
            self.node(i).rng.sample(&pool, k.min(pool.len()), &mut drawn, &mut scratch);
            targets.extend(drawn);
        }
        targets
    }

    #[allow(clippy::too_many_arguments)]
    fn span(&mut self, publish: bool, node: u32, src: Option<u32>, event: u32, hops: u32, first: bool, parent: u64) -> u64 {
        self.span_seq += 1;
        let subscriber = has_bit(&self.bits[node as usize], self.event_topic[event as usize]);
        let src = src.map_or(0, |s| s as u64 + 1);
        self.spans.push(Span { seq: self.span_seq, parent, publish, at: self.now, node, src, event, hops, first, subscriber });
        self.span_seq
    }

    /// `Stack.send_copies` and `Simulation.send` of an event copy (no bandwidth: no size).
    fn send_event(&mut self, src: u32, targets: Vec<u32>, event: u32, hops: u32, span: u64) {
        for dst in targets {
            self.node(src).count(EVENTS_SENT, 1);
            if self.dropped() {
                self.node(src).count(DROPPED_BY_LINK, 1);
                continue;
            }
            let at = self.now + self.delay();
            let sender = self.me(src);
            let slot = self.put(Msg { src, dst, layer: EVENT, reply: false, sender, entries: Vec::new(), event, hops, span });
            self.push(at, MSG, slot as u64);
        }
    }

    /// `RingCast.on_send_failed` with `ring_failover`: an event copy to a dead ring neighbour
    /// (the first of a side of the event's ring) drops it from RINGS (`Rings.drop`) and goes, as
    /// it was, to the side's next neighbour (each once), under the failed copy's parent span.
    fn failover(&mut self, msg: Msg) {
        let (src, dst, t) = (msg.src, msg.dst, self.event_topic[msg.event as usize]);
        let Ok(p) = self.topics[src as usize].binary_search(&t) else { return };
        let node = self.nd(src);
        let (on_succ, on_pred) = (node.succ[p].first() == Some(&dst), node.pred[p].first() == Some(&dst));
        if !on_succ && !on_pred {
            return; // a shortcut, or a neighbour already replaced
        }
        self.ring_drop(src, dst);
        let node = self.nd(src);
        let mut nexts: Vec<u32> = Vec::new();
        for (on, side) in [(on_succ, &node.succ[p]), (on_pred, &node.pred[p])] {
            if let (true, Some(&n)) = (on, side.first()) {
                if !nexts.contains(&n) {
                    nexts.push(n);
                }
            }
        }
        self.send_event(src, nexts, msg.event, msg.hops, msg.span);
    }

    fn saw(&mut self, i: u32, event: u32) {
        let capacity = self.cfg.seen_capacity;
        let node = self.node(i);
        node.seen.push_back(event);
        node.seen_set.insert(event);
        if node.seen.len() > capacity {
            let old = node.seen.pop_front().expect("over capacity");
            node.seen_set.remove(&old);
        }
    }

    /// `Stack._on_event` and its interpretation: the delivery (counted, a span), and a first copy
    /// of a subscribed topic passed on.
    fn event_deliver(&mut self, msg: Msg) {
        let (src, dst, event) = (msg.src, msg.dst, msg.event);
        let first = !self.nd(dst).seen_set.contains(&event);
        let node = self.node(dst);
        node.count(EVENTS_RECEIVED, 1);
        node.count(DUPLICATES, (!first) as u64);
        let span = self.span(false, dst, Some(src), event, msg.hops, first, msg.span);
        if first {
            self.saw(dst, event);
            let topic = self.event_topic[event as usize];
            if has_bit(&self.bits[dst as usize], topic) {
                let targets = self.targets(dst, topic, Some(src));
                self.send_event(dst, targets, event, msg.hops + 1, span);
            }
        }
    }

    // --- the loop -------------------------------------------------------------------------------

    fn dropped(&mut self) -> bool {
        self.link_partitioned || (self.link_loss > 0.0 && self.link_rng.random() < self.link_loss)
    }

    fn delay(&mut self) -> f64 {
        let mut ms = self.link_delay_ms;
        if self.link_jitter_ms != 0.0 {
            let (a, b) = (-self.link_jitter_ms, self.link_jitter_ms);
            ms += a + (b - a) * self.link_rng.random();
        }
        (if ms > 0.0 { ms } else { 0.0 }) / 1000.0
    }

    fn deliver(&mut self, slot: usize) {
        let msg = self.msgs[slot].take().expect("a message in flight");
        self.free_msgs.push(slot);
        let alive = self.nodes.get(msg.dst as usize).and_then(Option::as_ref).is_some_and(|n| n.alive);
        if !alive {
            self.node(msg.src).count(LOST_TO_DEAD_PEER, 1);
            if msg.layer == EVENT && self.cfg.ring_failover && self.nd(msg.src).alive {
                self.failover(msg);
            }
            return;
        }
        match msg.layer {
            CYC => self.cyc_deliver(msg.src, msg.dst, msg.reply, msg.entries),
            VIC => self.vic_deliver(msg.src, msg.dst, msg.reply, msg.sender, msg.entries),
            RING => self.ring_deliver(msg.src, msg.dst, msg.reply, msg.sender, msg.entries),
            _ => self.event_deliver(msg),
        }
    }

    fn handle(&mut self, p: &Rc<Profile>) -> u32 {
        let key = Rc::as_ptr(p);
        if let Some(&h) = self.handed_out.get(&key) {
            return h;
        }
        let h = self.out_profiles.len() as u32;
        self.handed_out.insert(key, h);
        self.out_profiles.push(p.clone());
        h
    }

    fn entries_in(&self, list: Vec<(u32, u32)>) -> PyResult<Vec<Entry>> {
        list.into_iter()
            .map(|(h, age)| {
                let prof = self.handed_in.get(h as usize).ok_or_else(|| PyValueError::new_err("unknown profile"))?;
                Ok(Entry { id: prof.node, age, prof: prof.clone() })
            })
            .collect()
    }

    fn entries_out(&mut self, list: &[Entry]) -> Vec<(u32, u32)> {
        list.iter().map(|d| (self.handle(&d.prof), d.age)).collect()
    }
}

impl EventLoop for PolderEngine {
    fn heap(&mut self) -> &mut BinaryHeap<Due> {
        &mut self.queue
    }

    fn clocks(&mut self) -> (&mut f64, &mut u64, &mut f64) {
        (&mut self.now, &mut self.steps, &mut self.frozen_s)
    }

    /// `Stack.on_timer`: the layer's tick (pending replies past their deadline first), re-armed.
    fn timer(&mut self, data: u64, at: f64) {
        let (i, layer) = ((data / 3) as u32, (data % 3) as usize);
        let now = self.now;
        let node = self.node(i);
        if node.timers[layer] != Some(at) || !node.alive {
            return;
        }
        node.timers[layer] = None;
        match layer {
            CYC => {
                node.cyc_pending.retain(|p| p.deadline > now);
                self.cyc_tick(i)
            }
            VIC => {
                node.vic_pending.retain(|p| p.deadline > now);
                self.vic_tick(i)
            }
            _ => self.ring_tick(i),
        }
        let next = now + self.cfg.period[layer];
        self.node(i).timers[layer] = Some(next);
        self.push(next, TIMER, data);
    }

    fn deliver(&mut self, data: u64) {
        PolderEngine::deliver(self, data as usize);
    }

    fn shift_timer(&mut self, data: u64, at: f64, shift: f64) {
        let timer = &mut self.node((data / 3) as u32).timers[(data % 3) as usize];
        if *timer == Some(at) {
            *timer = Some(at + shift);
        }
    }
}

type Pairs = Vec<(u32, u32)>;
type NodeOut = (
    u32,
    Vec<u64>,
    [Option<f64>; 3],
    [u64; 3],
    (Pairs, Pairs, Vec<(u32, f64, Vec<u32>)>),
    (Pairs, Vec<(u32, f64)>),
    (Pairs, Vec<(u32, Vec<u32>, Vec<u32>)>, Vec<u32>, Vec<(u32, u32)>, Vec<u32>, Vec<(u32, f64, bool)>),
    (Vec<u32>, u64),
    Vec<(u8, u64)>,
);

#[pymethods]
impl PolderEngine {
    /// The config (per layer: CYCLON, VICINITY, RINGS), the link (one rule for every
    /// destination, a constant base delay folded into `delay_ms`), the links' random state, and
    /// per topic number the bytes of its field in a TopicPriority.
    /// `options` by name, as PolderCast's config names them: CYCLON's `cyclon.view_size`,
    /// `cyclon.shuffle_length`, `cyclon.refill`; `vicinity_view`, `vicinity_gossip`,
    /// `ring_size`, `ring_gossip`, `priority_mode`, `ring_removal`, `ring_selection`, `fanout`,
    /// `seen_capacity`, `ring_failover`, `shortcut_layers` (the layers `shortcut_source` names); per layer
    /// (CYCLON, VICINITY, RINGS) `periods_s`, `timeouts_s` and `layer_bytes`. `link` as in
    /// `link_options`.
    #[new]
    fn new(
        nodes: usize, topics: usize, options: Bound<'_, PyDict>, link: Bound<'_, PyDict>, link_rng: Vec<u64>,
        topic_bytes: Vec<u64>, topic_rank: Vec<u32>,
    ) -> PyResult<PolderEngine> {
        let mut o = Options::new(options);
        let (cyc_view, cyc_shuffle, refill) = (o.usize("cyclon.view_size")?, o.usize("cyclon.shuffle_length")?, o.bool("cyclon.refill")?);
        let (vic_view, vic_gossip) = (o.usize("vicinity_view")?, o.usize("vicinity_gossip")?);
        let (ring_size, ring_gossip) = (o.usize("ring_size")?, o.usize("ring_gossip")?);
        let (period, timeout, layer_bytes) = (o.f64s("periods_s")?, o.f64s("timeouts_s")?, o.u64s("layer_bytes")?);
        let max_mode = o.choice("priority_mode", &["max", "sum"])? == 0;
        let removal_on_timeout = o.choice("ring_removal", &["on_timeout", "on_initiate"])? == 0;
        let nearest_first = o.choice("ring_selection", &["nearest_first", "random"])? == 0;
        let (fanout, seen_capacity, ring_failover) = (o.usize("fanout")?, o.usize("seen_capacity")?, o.bool("ring_failover")?);
        let shortcut_layers = o.strings("shortcut_layers")?;
        if shortcut_layers.iter().any(|l| l != "cyclon" && l != "vicinity") {
            return Err(PyValueError::new_err(format!("option shortcut_layers: {shortcut_layers:?} names other layers than cyclon and vicinity")));
        }
        let shortcuts = (shortcut_layers.iter().any(|l| l == "cyclon"), shortcut_layers.iter().any(|l| l == "vicinity"));
        o.done()?;
        let link = crate::link_options(link)?;
        if cyc_shuffle < 1 || cyc_shuffle > cyc_view || ring_size < 2 || ring_size % 2 == 1 || topic_bytes.len() != topics
            || topic_rank.len() != topics
        {
            return Err(PyValueError::new_err("an invalid PolderCast config"));
        }
        if fanout < 2 || seen_capacity < 1 {
            return Err(PyValueError::new_err("an invalid RingCast config"));
        }
        Ok(PolderEngine {
            cfg: Config {
                cyclon: Cyclon { view_size: cyc_view, shuffle_length: cyc_shuffle, refill }, vic_view, vic_gossip, ring_size, ring_gossip, period, timeout,
                layer_bytes, max_mode, removal_on_timeout, nearest_first, fanout, shortcuts, seen_capacity, ring_failover,
            },
            topics: vec![Vec::new(); nodes], bits: vec![Vec::new(); nodes], base_size: vec![0; nodes], topic_bytes, topic_rank,
            rid: vec![0; nodes], link_delay_ms: link.0, link_jitter_ms: link.1, link_loss: link.2,
            link_partitioned: link.3, link_rng: Mt::from_state(&link_rng)?, nodes: (0..nodes).map(|_| None).collect(),
            queue: BinaryHeap::new(), msgs: Vec::new(), free_msgs: Vec::new(), now: 0.0, steps: 0, seq: 0,
            frozen_s: 0.0, node_marks: Marks::new(nodes), topic_marks: Marks::new(topics),
            topic_marks2: Marks::new(topics), event_topic: Vec::new(), span_seq: 0, spans: Vec::new(),
            handed_in: Vec::new(), handed_out: HashMap::new(),
            out_profiles: Vec::new(), cyc_scratch: Scratch::default(),
        })
    }

    /// Node `i`'s topics (numbers, sorted), its ring id and its profile's size but the priorities.
    fn set_topics(&mut self, i: usize, topics: Vec<u32>, rid: u64, base_size: u64) -> PyResult<()> {
        if i >= self.topics.len() || topics.windows(2).any(|w| w[0] >= w[1]) {
            return Err(PyValueError::new_err("a node out of range or topics not sorted"));
        }
        let mut bits = vec![0u64; self.topic_bytes.len().div_ceil(64)];
        for &t in &topics {
            *bits.get_mut((t >> 6) as usize).ok_or_else(|| PyValueError::new_err("a topic out of range"))? |= 1 << (t & 63);
        }
        (self.topics[i], self.bits[i], self.rid[i], self.base_size[i]) = (topics, bits, rid, base_size);
        Ok(())
    }

    /// A profile handed in: its number (`add_node` and `put_msg` name profiles by it).
    fn add_profile(&mut self, node: u32, prio: Vec<(u32, u32)>) -> u32 {
        let p = self.profile(node, prio);
        self.handed_in.push(p);
        (self.handed_in.len() - 1) as u32
    }

    /// Node `i`'s state: descriptors as (profile number, age); pending replies as (partner,
    /// deadline, kept); RINGS's slots as (topic, succ, pred) in dict order; `rng` as
    /// getstate()[1]; timers and late replies per layer.
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn add_node(
        &mut self, i: usize, me: u32, alive: bool, rng: Vec<u64>, timers: [Option<f64>; 3], late: [u64; 3],
        cyclon: (Pairs, Pairs, Vec<(u32, f64, Vec<u32>)>), vicinity: (Pairs, Vec<(u32, f64)>),
        rings: (Pairs, Vec<(u32, Vec<u32>, Vec<u32>)>, Vec<u32>, Vec<(u32, u32)>, Vec<u32>, Vec<(u32, f64, bool)>),
        events: (Vec<u32>, u64),
    ) -> PyResult<()> {
        let me = self.handed_in.get(me as usize).ok_or_else(|| PyValueError::new_err("unknown profile"))?.clone();
        let n = self.topics.get(i).ok_or_else(|| PyValueError::new_err("node id out of range"))?.len();
        let (ring_view, slots, holes, prio, considered, ring_pending) = rings;
        let mut node = Node {
            alive, me, rng: Mt::from_state(&rng)?, timers, late,
            cyc_view: self.entries_in(cyclon.0)?, reserve: self.entries_in(cyclon.1)?,
            cyc_pending: cyclon.2.into_iter().map(|(partner, deadline, kept)| Pending { partner, deadline, kept }).collect(),
            vic_view: self.entries_in(vicinity.0)?,
            vic_pending: vicinity.1.into_iter().map(|(partner, deadline)| Pending { partner, deadline, kept: () }).collect(),
            ring_view: ODict::default(), order: Vec::new(), in_order: vec![false; n], succ: vec![Vec::new(); n],
            pred: vec![Vec::new(); n], holes, prio: vec![0; n], considered,
            ring_pending: ring_pending.into_iter().map(|(partner, deadline, kept)| Pending { partner, deadline, kept }).collect(),
            seen_set: events.0.iter().copied().collect(), seen: events.0.into(), published: events.1,
            own_keys: None,
            stats: Vec::new(),
        };
        for d in self.entries_in(ring_view)? {
            node.ring_view.insert(d);
        }
        let pos = |t: u32| self.topics[i].binary_search(&t).map_err(|_| PyValueError::new_err("not a topic of the node"));
        for (t, succ, pred) in slots {
            let p = pos(t)?;
            (node.in_order[p], node.succ[p], node.pred[p]) = (true, succ, pred);
            node.order.push(p as u32);
        }
        for (t, p) in prio {
            node.prio[pos(t)?] = p;
        }
        for &t in &node.holes {
            pos(t)?;
        }
        self.nodes[i] = Some(node);
        Ok(())
    }

    /// The profiles handed in are no longer needed (every node and message is in).
    fn forget_handed_in(&mut self) {
        self.handed_in = Vec::new();
    }

    fn set_clock(&mut self, now: f64, steps: u64, seq: u64, frozen_s: f64, span_seq: u64) {
        (self.now, self.steps, self.seq, self.frozen_s, self.span_seq) = (now, steps, seq, frozen_s, span_seq);
    }

    /// More events (numbered on from those before), by topic number: those the nodes' duplicate
    /// filters hold when handed in.
    fn add_events(&mut self, topics: Vec<u32>) {
        self.event_topic.extend(topics);
    }

    /// `Stack.publish` on node `i` (alive: the caller checks) and its interpretation: the
    /// event's number and the node's count of events published, or an error where the node
    /// does not subscribe to the topic.
    fn publish(&mut self, i: u32, topic: u32) -> PyResult<(u32, u64)> {
        if self.topics.get(i as usize).is_none_or(|t| t.binary_search(&topic).is_err()) {
            return Err(PyValueError::new_err(format!("node {i} publishes on topic number {topic} without subscribing")));
        }
        let event = self.event_topic.len() as u32;
        self.event_topic.push(topic);
        let node = self.node(i);
        node.published += 1;
        let published = node.published;
        self.saw(i, event);
        self.node(i).count(EVENTS_PUBLISHED, 1);
        let span = self.span(true, i, None, event, 0, true, 0);
        let targets = self.targets(i, topic, None);
        self.send_event(i, targets, event, 1, span);
        Ok((event, published))
    }

    /// `Simulation.start_node` on node `i` (not alive; its state, whatever it holds, is kept:
    /// a first join, or a rejoin with `resume`), and `Stack.start`: CYCLON takes the contacts
    /// (node, priorities) at age 0 (`Cyclon.bootstrap`: merged, and kept in the reserve with
    /// `refill`); then each layer's first tick at `now + uniform(0, period)`, drawn and set
    /// in the stack's layer order: CYCLON, RINGS, VICINITY.
    fn start_node(&mut self, i: u32, contacts: Vec<(u32, Vec<(u32, u32)>)>) -> PyResult<()> {
        if self.nodes.get(i as usize).and_then(Option::as_ref).is_none_or(|n| n.alive) {
            return Err(PyValueError::new_err(format!("node {i} is not a stopped node of the engine")));
        }
        let mut entries = Vec::with_capacity(contacts.len());
        for (node, prio) in contacts {
            if node as usize >= self.topics.len() || prio.iter().any(|&(t, _)| t as usize >= self.topic_bytes.len()) {
                return Err(PyValueError::new_err("a contact or a topic out of range"));
            }
            entries.push(Entry { id: node, age: 0, prof: self.profile(node, prio) });
        }
        let mut scratch = std::mem::take(&mut self.cyc_scratch);
        let node = self.nodes[i as usize].as_mut().expect("a node the engine holds");
        node.alive = true;
        self.cfg.cyclon.merge(&mut node.cyc_view, i, &entries, &[], &mut scratch);
        if self.cfg.cyclon.refill {
            for d in entries {
                self.cfg.cyclon.keep(&mut node.reserve, d);
            }
        }
        self.cyc_scratch = scratch;
        let now = self.now;
        for layer in [CYC, RING, VIC] {
            let period = self.cfg.period[layer];
            let node = self.node(i);
            let at = now + (0.0 + (period - 0.0) * node.rng.random());
            node.timers[layer] = Some(at);
            self.push(at, TIMER, i as u64 * 3 + layer as u64);
        }
        Ok(())
    }

    /// `Simulation.stop_node`: node `i` crashes (or has left: `Stack.leave` sends nothing); its
    /// timers are cancelled, messages to it are lost from now on; its state stays.
    fn stop_node(&mut self, i: u32) -> PyResult<()> {
        let node = self.nodes.get_mut(i as usize).and_then(Option::as_mut)
            .ok_or_else(|| PyValueError::new_err(format!("node {i} is not a node of the engine")))?;
        node.alive = false;
        node.timers = [None; 3];
        Ok(())
    }

    /// The span records since the last call: (span number, parent's (0: none), publish, time,
    /// node, source + 1 (0: none), event number, hops, first copy, subscriber).
    #[allow(clippy::type_complexity)]
    fn take_spans(&mut self) -> Vec<(u64, u64, bool, f64, u32, u64, u32, u32, bool, bool)> {
        self.spans.drain(..).map(|r| (r.seq, r.parent, r.publish, r.at, r.node, r.src, r.event, r.hops, r.first, r.subscriber)).collect()
    }

    fn put_timer(&mut self, at: f64, seq: u64, node: u32, layer: u32) {
        self.queue.push(Due { at, seq, kind: TIMER, data: node as u64 * 3 + layer as u64 });
    }

    #[allow(clippy::too_many_arguments)]
    fn put_msg(&mut self, at: f64, seq: u64, src: u32, dst: u32, layer: usize, reply: bool, sender: (u32, u32), list: Pairs) -> PyResult<()> {
        let sender = self.entries_in(vec![sender])?.pop().expect("one");
        let msg = Msg { src, dst, layer, reply, sender, entries: self.entries_in(list)?, event: 0, hops: 0, span: 0 };
        let slot = self.put(msg);
        self.queue.push(Due { at, seq, kind: MSG, data: slot as u64 });
        Ok(())
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

    /// The snapshot rows of `nodes` in columns (`controller.backends.rundir.SNAPSHOT_SCHEMA`),
    /// five rows per node (CYCLON, VICINITY, RINGS, its succ and pred slots): the nodes; per row
    /// the neighbours (offsets, values), the per-topic links (offsets into the entries; each
    /// entry's topic number and links: offsets, values) and the node's topics, each by number
    /// in name order. A 10,000-node snapshot is millions of values.
    #[allow(clippy::type_complexity)]
    fn snapshot_columns(&self, nodes: Vec<u32>) -> PyResult<(Vec<u32>, Vec<i32>, Vec<u32>, Vec<i32>, Vec<u32>, Vec<i32>, Vec<u32>, Vec<i32>, Vec<u32>)> {
        let (mut nb_off, mut nb) = (vec![0i32], Vec::new());
        let (mut pt_off, mut pt_keys, mut pt_item_off, mut pt_items) = (vec![0i32], Vec::new(), vec![0i32], Vec::new());
        let (mut tp_off, mut tp) = (vec![0i32], Vec::new());
        let mut by_name: Vec<usize> = Vec::new();
        for &i in &nodes {
            let node = self.nodes.get(i as usize).and_then(Option::as_ref).ok_or_else(|| PyValueError::new_err("a node the engine does not hold"))?;
            let topics = &self.topics[i as usize];
            by_name.clear();
            by_name.extend(0..topics.len());
            by_name.sort_unstable_by_key(|&p| self.topic_rank[topics[p] as usize]);
            for layer in 0..5 {
                match layer {
                    0 => nb.extend(node.cyc_view.iter().map(|d| d.id)),
                    1 => nb.extend(node.vic_view.iter().map(|d| d.id)),
                    2 => nb.extend(node.ring_view.iter().map(|d| d.id)),
                    _ => {
                        let slots = if layer == 3 { &node.succ } else { &node.pred };
                        for &p in by_name.iter().filter(|&&p| !slots[p].is_empty()) {
                            pt_keys.push(topics[p]);
                            pt_items.extend(slots[p].iter().copied());
                            pt_item_off.push(pt_items.len() as i32);
                        }
                    }
                }
                nb_off.push(nb.len() as i32);
                pt_off.push(pt_keys.len() as i32);
                tp.extend(by_name.iter().map(|&p| topics[p]));
                tp_off.push(tp.len() as i32);
            }
        }
        Ok((nodes, nb_off, nb, pt_off, pt_keys, pt_item_off, pt_items, tp_off, tp))
    }

    /// Node `i`'s state, as `add_node` takes it (its profile numbers name `profiles()`), with
    /// its counters in order of first use. The engine lets go of the node.
    fn take_node(&mut self, i: usize) -> PyResult<NodeOut> {
        let n = self.nodes.get_mut(i).and_then(Option::take).ok_or_else(|| PyValueError::new_err("a node the engine does not hold"))?;
        let me = self.handle(&n.me);
        let cyclon = (
            self.entries_out(&n.cyc_view),
            self.entries_out(&n.reserve),
            n.cyc_pending.into_iter().map(|p| (p.partner, p.deadline, p.kept)).collect(),
        );
        let vicinity = (self.entries_out(&n.vic_view), n.vic_pending.into_iter().map(|p| (p.partner, p.deadline)).collect());
        let ring_view: Vec<Entry> = n.ring_view.iter().cloned().collect();
        let topics = &self.topics[i];
        let slots = n.order.iter().map(|&p| (topics[p as usize], n.succ[p as usize].clone(), n.pred[p as usize].clone())).collect();
        let prio = topics.iter().zip(n.prio.iter()).filter(|(_, &p)| p > 0).map(|(&t, &p)| (t, p)).collect();
        let rings = (
            self.entries_out(&ring_view),
            slots,
            n.holes,
            prio,
            n.considered,
            n.ring_pending.into_iter().map(|p| (p.partner, p.deadline, p.kept)).collect(),
        );
        Ok((me, n.rng.to_state(), n.timers, n.late, cyclon, vicinity, rings, (n.seen.into(), n.published), n.stats))
    }

    /// The profiles `take_node` and `queue` named so far, by number: (node, priorities).
    fn profiles(&self, start: usize) -> Vec<(u32, Vec<(u32, u32)>)> {
        self.out_profiles[start.min(self.out_profiles.len())..].iter().map(|p| (p.node, p.prio.clone())).collect()
    }

    /// The queue: (at, seq, kind, data) with kind 0 timer (data: node, layer), 1 message (data:
    /// src, dst, layer, reply, sender, entries; an event copy: src, dst, 3, event, hops, span),
    /// 2 call (data: handle); in no particular order.
    #[allow(clippy::type_complexity)]
    fn queue(&mut self, py: Python<'_>) -> PyResult<Vec<(f64, u64, u8, Py<PyAny>)>> {
        let dues: Vec<Due> = self.queue.iter().copied().collect();
        let mut out = Vec::with_capacity(dues.len());
        for due in dues {
            let data = match due.kind {
                MSG if self.msgs[due.data as usize].as_ref().is_some_and(|m| m.layer == EVENT) => {
                    let m = self.msgs[due.data as usize].as_ref().expect("a message in flight");
                    (m.src, m.dst, m.layer, m.event, m.hops, m.span).into_pyobject(py)?.into_any().unbind()
                }
                MSG => {
                    let m = self.msgs[due.data as usize].take().expect("a message in flight");
                    let sender = self.entries_out(std::slice::from_ref(&m.sender))[0];
                    let entries = self.entries_out(&m.entries);
                    let data = (m.src, m.dst, m.layer, m.reply, sender, entries).into_pyobject(py)?.into_any().unbind();
                    self.msgs[due.data as usize] = Some(m);
                    data
                }
                TIMER => (due.data / 3, due.data % 3).into_pyobject(py)?.into_any().unbind(),
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
