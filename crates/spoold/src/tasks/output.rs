//! Capture of one task attempt's output — stdout and stderr, which are one pipe — redacted,
//! into one bounded log file.
//!
//! **Invariants.** Secrets never reach disk nor a live follower: every byte passes through the
//! [`Redactor`] (the literal secrets' search and the patterns, in the same bytes) before it is
//! written or broadcast. Memory is bounded independent of output size: after each read, what
//! is held back ([`OutputLog::held_back`]) is at most a secret's start (the longest secret less
//! one byte) or, with patterns, an unfinished line of up to [`LINE_CAP`] (or a secret's start,
//! if a secret is longer) — whatever the output, a chain of overlapping copies of a secret that
//! never ends (`aba` in `ababab…`) included; and the tail of a long output lives in a ring
//! *file* written with positioned writes, not in memory.
//!
//! The stored file is the first `limit / 2` bytes of the (redacted) output, then — only if
//! something was dropped — a marker line `\n[spoold: N bytes of output omitted]\n`, then the last
//! `limit - limit / 2` bytes. While the attempt runs the file holds the head only; the tail is
//! appended by [`OutputLog::finish`].
//!
//! Order: the output is kept in the order it was read, which is the order the program wrote it
//! (one pipe for stdout and stderr, as a terminal shows `2>&1`) — released as it comes, except
//! what is held back. A literal secret may be arriving in pieces: the start of one is held until
//! the rest comes (or does not). With `redact` patterns, which are matched within a line, an
//! unfinished line is held until it ends (or reaches [`LINE_CAP`]). At the end, what is held is
//! released.
//!
//! Cuts: a secret found is not held whole. What goes is redacted up to the cut, and the last
//! bytes released (as many as the longest secret less one) are kept as context and searched
//! again with what follows: the rest of a secret that straddles the cut is found, and redacted
//! under the marker written for its start, so no piece of it gets out and literal secrets are
//! redacted the same wherever the reads fell. One [`REDACTED`] (one redaction counted) replaces
//! overlapping matches, however long the chain.
//!
//! Matching rules: literal secrets are found wherever they appear, split across any number of
//! reads — in the order the program wrote its bytes: a secret printed in pieces with other
//! output between them is not one. A regex is matched against whole lines (blocks of complete
//! lines, in fact), so it is only guaranteed to see a match that lies within one line of up to
//! [`LINE_CAP`] bytes; use `(?m)` for `^`/`$` to mean line starts and ends. Regexes run in
//! Unicode mode (the `regex` crate's default), where `\S` does not match bytes that are not
//! UTF-8: write `(?-u:\S)` to match any non-space byte.

use std::fmt::{self, Write as _};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::mem;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use regex_automata::meta::{self, Regex};
use regex_automata::util::{iter::Searcher, syntax};
use regex_automata::{Input, MatchKind};
use tokio::sync::broadcast;

/// A line longer than this is redacted in pieces: literals are still caught across the cut,
/// regexes may miss a match that crosses it.
pub const LINE_CAP: usize = 64 * 1024;

/// What a redacted match is replaced by.
pub const REDACTED: &str = "[REDACTED]";

/// Chunks a live follower may fall behind by before it sees `RecvError::Lagged`; also what a
/// slow follower can cost in memory (times [`LIVE_CHUNK`]).
const LIVE_CAPACITY: usize = 128;

/// Output is sent to live followers in pieces of at most this size, whatever the size of the
/// reads, so that a follower that falls behind costs at most `LIVE_CAPACITY × LIVE_CHUNK` (8 MiB).
const LIVE_CHUNK: usize = 64 * 1024;

/// A piece of input at least this long is redacted in two parts on two threads, when the
/// machine has more than one CPU: redaction is what bounds a chatty script's output rate (a
/// dense line costs as much as its matches, about 200 MiB/s on one core with a few rules).
const PARALLEL_MIN: usize = 256 * 1024;

/// What to redact: literal secret values and patterns. Cheap to clone (shared, compiled once).
///
/// `Debug` prints counts only, never a secret.
#[derive(Clone, Default)]
pub struct RedactRules(Arc<Compiled>);

/// A redaction rule that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    #[error("invalid redaction pattern {pattern:?}")]
    InvalidPattern {
        pattern: String,
        #[source]
        source: Box<meta::BuildError>,
    },
    #[error("redaction pattern {pattern:?} matches the empty string")]
    MatchesEmpty { pattern: String },
    /// The regex error is dropped on purpose: its text could quote a secret.
    #[error("secret values too large to redact ({bytes} bytes in all)")]
    SecretsTooLarge { bytes: usize },
}

/// Redacts one stream of bytes that arrives in arbitrary pieces.
///
/// With patterns, input is held until a line is complete (or [`LINE_CAP`] is exceeded): a
/// pattern is matched within a line. With literal secrets only, no more is held than the start
/// of a secret that may still be arriving. Either way a secret split across reads is still
/// found.
///
/// A literal secret that straddles a cut — one of a chain of overlapping secrets (`aba` in
/// `ababab…`), which never ends — is redacted up to the cut, and the rest of it after: the last
/// bytes released (the longest secret less one) are kept as context to find it again. One
/// marker stands for it (for a whole chain), as if there had been no cut.
pub struct Redactor {
    rules: RedactRules,
    /// Input not yet redacted: the start of an incomplete line, or of a secret.
    pending: Vec<u8>,
    /// The last bytes released, as they came in (at most the longest secret less one).
    context: Vec<u8>,
    /// The last byte released lay in a match, for which a marker was written.
    tail_marked: bool,
    /// Scratch: the context and the first bytes after it.
    near: Vec<u8>,
    scratch: Scratch,
    redactions: u64,
    /// Redacts the second part of a large piece on another thread; made on first use, kept
    /// with its scratch space (its `pending` is always empty between pushes).
    helper: Option<Box<Helper>>,
}

/// The second thread's redactor and output, reused across pushes.
struct Helper {
    redactor: Redactor,
    out: Vec<u8>,
}

/// The output log of one attempt: its one output stream (stdout and stderr are one pipe),
/// redacted, bounded to the type's output limit.
///
/// The file I/O is blocking (plain `std::fs`); drive it from a blocking thread.
pub struct OutputLog {
    path: PathBuf,
    /// Opened with the first byte of output: an attempt that prints nothing costs no file.
    file: Option<File>,
    head_cap: u64,
    tail_cap: u64,
    /// Bytes written to `file` so far (at most `head_cap` until `finish`).
    head_len: u64,
    /// Bytes that went past the head, into the ring.
    tail_len: u64,
    /// The tail, created on first use and unlinked at once: nothing is left behind on a crash.
    ring: Option<File>,
    /// Literal secrets and patterns, searched in the same bytes.
    redactor: Redactor,
    /// Scratch for redacted output, reused across writes.
    buf: Vec<u8>,
    live: broadcast::Sender<Bytes>,
}

/// A live follower's view of a running attempt's output.
pub struct Subscription {
    /// Offset (in the redacted output) of the first byte `chunks` will deliver. Bytes before it
    /// are in the log file if `from` is within the head.
    pub from: u64,
    /// Every redacted chunk accepted from now on; closed when the log is finished or dropped.
    pub chunks: broadcast::Receiver<Bytes>,
}

/// What an attempt's output came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputSummary {
    /// Output produced, after redaction (stored or not).
    pub bytes: u64,
    /// Bytes dropped between head and tail.
    pub truncated_bytes: u64,
    /// Markers written: one per secret or pattern match, or one for overlapping ones (a chain
    /// of copies of one secret, however long).
    pub redactions: u64,
}

/// Redacts a result summary, then cuts it to at most `max` bytes on a character boundary. The
/// cut is taken as the end of the text: a start of a literal secret (4 bytes or more) left
/// right before it is redacted too.
pub fn redact_summary(rules: &RedactRules, text: &str, max: usize) -> String {
    let mut out = redact_all(rules, text);
    if out.len() <= max {
        return out;
    }
    out.truncate(floor_char_boundary(&out, max));
    if let Some(start) = rules.0.secret_start_at_end(out.as_bytes()) {
        let keep = start.min(max.saturating_sub(REDACTED.len()));
        out.truncate(floor_char_boundary(&out, keep));
        out.push_str(REDACTED);
    }
    out
}

/// The largest index not above `at` that is a character boundary of `text`.
fn floor_char_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Redacts a short text in one go (an error message, a result summary).
pub fn redact_all(rules: &RedactRules, text: &str) -> String {
    if rules.is_empty() {
        return text.to_owned();
    }
    let mut out = Vec::with_capacity(text.len());
    let mut scratch = Scratch::new(&rules.0);
    redact_block(
        &rules.0,
        &mut scratch,
        text.as_bytes(),
        text.len(),
        Straddle::Take,
        Resumed::default(),
        &mut out,
    );
    // A literal secret need not be valid UTF-8, so cutting it out can split a character.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

#[derive(Default)]
struct Compiled {
    /// All literals as one alternation, longest first, so at any position the longest secret
    /// that starts there wins.
    literals: Option<Regex>,
    /// The literals themselves (to tell whether a text ends with the start of one).
    literal_bytes: Vec<Vec<u8>>,
    literal_count: usize,
    /// One regex per pattern, each run on its own so that their matches may overlap.
    regexes: Vec<Regex>,
    longest_literal: usize,
    /// The longest literal containing `\n`: one may straddle a line end.
    longest_multiline_literal: usize,
    /// Large pieces may be redacted on two threads (more than one CPU).
    parallel: bool,
}

/// What one thread needs to search with the rules: a cache per regex (the regexes are shared,
/// their caches are not, so two threads never contend for one), and room for the matches.
struct Scratch {
    literal_cache: Option<meta::Cache>,
    caches: Vec<meta::Cache>,
    /// The matches of each rule (the literals first, then each regex), each in order.
    found: Vec<Vec<(usize, usize)>>,
    /// Where each rule's next match is, while they are merged.
    heads: Vec<usize>,
    /// The merged matches of the block being redacted.
    spans: Vec<(usize, usize)>,
}

impl RedactRules {
    /// Compiles the rules. Empty literals are ignored, duplicates dropped.
    pub fn new(literals: Vec<Vec<u8>>, regexes: &[String]) -> Result<Self, RuleError> {
        let mut literals: Vec<Vec<u8>> = literals.into_iter().filter(|l| !l.is_empty()).collect();
        literals.sort_unstable_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        literals.dedup();
        let literal_re = if literals.is_empty() {
            None
        } else {
            let pattern = literals
                .iter()
                .map(|l| escape_literal(l))
                .collect::<Vec<_>>()
                .join("|");
            let re = compile(&pattern).map_err(|_| RuleError::SecretsTooLarge {
                bytes: literals.iter().map(Vec::len).sum(),
            })?;
            Some(re)
        };
        let regexes = regexes
            .iter()
            .map(|pattern| {
                let re = compile(pattern).map_err(|source| RuleError::InvalidPattern {
                    pattern: pattern.clone(),
                    source,
                })?;
                if re.is_match(b"") {
                    return Err(RuleError::MatchesEmpty {
                        pattern: pattern.clone(),
                    });
                }
                Ok(re)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RedactRules(Arc::new(Compiled {
            literals: literal_re,
            literal_bytes: literals.clone(),
            literal_count: literals.len(),
            regexes,
            longest_literal: literals.first().map_or(0, Vec::len),
            longest_multiline_literal: literals
                .iter()
                .filter(|l| l.contains(&b'\n'))
                .map(Vec::len)
                .max()
                .unwrap_or(0),
            parallel: more_than_one_cpu(),
        })))
    }

    /// No literals and no patterns: output passes through untouched.
    pub fn is_empty(&self) -> bool {
        self.0.literals.is_none() && self.0.regexes.is_empty()
    }
}

impl fmt::Debug for RedactRules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedactRules")
            .field("literals", &self.0.literal_count)
            .field("regexes", &self.0.regexes.len())
            .finish()
    }
}

impl Compiled {
    /// Where `text` ends with a proper start (at least 4 bytes) of a literal secret, the
    /// longest such start: its offset.
    fn secret_start_at_end(&self, text: &[u8]) -> Option<usize> {
        self.literal_bytes
            .iter()
            .flat_map(|l| (4..l.len()).filter(|&k| text.ends_with(&l[..k])))
            .max()
            .map(|k| text.len() - k)
    }

    /// How long a tail of `text` could be the start of a literal secret (0: none): the longest
    /// tail that some literal begins with (and is longer than). Positions are tried from the
    /// farthest back a secret could have begun; most fail at their first byte.
    fn pending_start(&self, text: &[u8]) -> usize {
        let from = text
            .len()
            .saturating_sub(self.longest_literal.saturating_sub(1));
        (from..text.len())
            .find(|&i| {
                let tail = &text[i..];
                self.literal_bytes
                    .iter()
                    .any(|l| l.len() > tail.len() && l.starts_with(tail))
            })
            .map_or(0, |i| text.len() - i)
    }

    /// Where the furthest literal secret that starts before `from` in `hay` and ends after it
    /// ends, counted from `from` (0: none does).
    fn literal_end_past(&self, hay: &[u8], from: usize, scratch: &mut Scratch) -> usize {
        let (Some(re), Some(cache)) = (&self.literals, scratch.literal_cache.as_mut()) else {
            return 0;
        };
        let mut end = from;
        let mut at = 0;
        while let Some(m) = re.search_with(cache, &Input::new(hay).span(at..hay.len())) {
            if m.start() >= from {
                break;
            }
            end = end.max(m.end());
            at = m.start() + 1;
        }
        end - from
    }

    /// Fills `scratch.spans` with every match in `hay`, in order and merged where they overlap.
    fn find_spans(&self, hay: &[u8], scratch: &mut Scratch) {
        let Scratch {
            literal_cache,
            caches,
            found,
            heads,
            spans,
        } = scratch;
        found.iter_mut().for_each(Vec::clear);
        if let (Some(re), Some(cache), Some(list)) =
            (&self.literals, literal_cache.as_mut(), found.first_mut())
        {
            // Overlapping search: a secret that starts inside another one is covered too.
            let mut at = 0;
            while let Some(m) = re.search_with(cache, &Input::new(hay).span(at..hay.len())) {
                list.push((m.start(), m.end()));
                at = m.start() + 1;
            }
        }
        for ((re, cache), list) in self.regexes.iter().zip(caches).zip(&mut found[1..]) {
            let mut matches = Searcher::new(Input::new(hay));
            while let Some(m) = matches.advance(|input| Ok(re.search_with(cache, input))) {
                if !m.is_empty() {
                    list.push((m.start(), m.end()));
                }
            }
        }
        // Each rule's matches are in order already: merge them (a sort cost more than the
        // search of a match-dense block), joining those that overlap.
        spans.clear();
        heads.clear();
        heads.resize(found.len(), 0);
        loop {
            let mut next: Option<(usize, usize, usize)> = None;
            for (rule, list) in found.iter().enumerate() {
                if let Some(&(start, end)) = list.get(heads[rule]) {
                    if next.is_none_or(|(s, _, _)| start < s) {
                        next = Some((start, end, rule));
                    }
                }
            }
            let Some((start, end, rule)) = next else {
                break;
            };
            heads[rule] += 1;
            match spans.last_mut() {
                Some(last) if start < last.1 => last.1 = last.1.max(end),
                _ => spans.push((start, end)),
            }
        }
    }
}

impl Scratch {
    fn new(rules: &Compiled) -> Self {
        Scratch {
            literal_cache: rules.literals.as_ref().map(Regex::create_cache),
            caches: rules.regexes.iter().map(Regex::create_cache).collect(),
            found: vec![Vec::new(); 1 + rules.regexes.len()],
            heads: Vec::new(),
            spans: Vec::new(),
        }
    }
}

/// Whether this process may run on more than one CPU. Asked once: the answer takes reading
/// cgroup files, and rules are compiled for every attempt.
fn more_than_one_cpu() -> bool {
    static MORE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *MORE.get_or_init(|| std::thread::available_parallelism().is_ok_and(|n| n.get() > 1))
}

/// Compiles a pattern as `regex::bytes::Regex::new` does (the syntax checked at start-up):
/// leftmost-first, matching bytes that need not be UTF-8.
fn compile(pattern: &str) -> Result<Regex, Box<meta::BuildError>> {
    meta::Builder::new()
        .configure(
            meta::Config::new()
                .nfa_size_limit(Some(10 << 20))
                .hybrid_cache_capacity(2 << 20)
                .match_kind(MatchKind::LeftmostFirst)
                .utf8_empty(false),
        )
        .syntax(syntax::Config::new().utf8(false))
        .build(pattern)
        .map_err(Box::new)
}

impl Redactor {
    /// A redactor for one stream.
    pub fn new(rules: &RedactRules) -> Self {
        Redactor {
            rules: rules.clone(),
            pending: Vec::new(),
            context: Vec::new(),
            tail_marked: false,
            near: Vec::new(),
            scratch: Scratch::new(&rules.0),
            redactions: 0,
            helper: None,
        }
    }

    /// Takes the next piece of the stream and appends to `out` what can be released: complete
    /// lines, or most of a line longer than [`LINE_CAP`].
    ///
    /// A large piece is cut after a line end near its middle and the two parts are pushed one
    /// after the other, the second on another thread at the same time: once a part that ends
    /// with a line end is pushed nothing is pending (no literal holds a line end), so the
    /// second part starts from the state it would have had anyway. The output is exactly that
    /// of the two pushes in turn, which is a split like any read boundary.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) {
        if self.rules.is_empty() {
            out.extend_from_slice(input);
            return;
        }
        match self.parallel_cut(input) {
            Some(cut) => self.push_in_two(input.split_at(cut), out),
            None => self.push_serial(input, out),
        }
    }

    /// Where to cut `input` in two for [`push_in_two`](Self::push_in_two), if it is worth it
    /// and safe: just after the last line end of its first half.
    fn parallel_cut(&self, input: &[u8]) -> Option<usize> {
        let rules = &self.rules.0;
        if !rules.parallel || input.len() < PARALLEL_MIN || rules.longest_multiline_literal > 1 {
            return None;
        }
        let half = &input[..input.len() / 2];
        half.iter().rposition(|&b| b == b'\n').map(|i| i + 1)
    }

    /// Pushes `first` here and `second` on a scoped thread at the same time. `first` ends with
    /// a line end, so nothing is pending after it and `second` may start from nothing.
    fn push_in_two(&mut self, (first, second): (&[u8], &[u8]), out: &mut Vec<u8>) {
        let mut helper = self.helper.take().unwrap_or_else(|| {
            Box::new(Helper {
                redactor: Redactor::new(&self.rules),
                out: Vec::new(),
            })
        });
        helper.out.clear();
        std::thread::scope(|scope| {
            let other = scope.spawn(|| helper.redactor.push_serial(second, &mut helper.out));
            self.push_serial(first, out);
            if let Err(panic) = other.join() {
                std::panic::resume_unwind(panic);
            }
        });
        debug_assert!(
            self.pending.is_empty(),
            "a part ending with a line end leaves nothing"
        );
        out.extend_from_slice(&helper.out);
        // The second part began with nothing before it that a secret could go on from (its
        // redactor had no context); what it released ends the context now.
        let helped = &mut helper.redactor;
        if !helper.out.is_empty() {
            let keep = self.rules.0.longest_literal.saturating_sub(1);
            extend_context(&mut self.context, &helped.context, keep);
            self.tail_marked = helped.tail_marked;
        }
        helped.context.clear();
        helped.tail_marked = false;
        mem::swap(&mut self.pending, &mut helper.redactor.pending);
        self.redactions += mem::take(&mut helper.redactor.redactions);
        self.helper = Some(helper);
    }

    /// [`push`](Self::push) on this thread.
    fn push_serial(&mut self, input: &[u8], out: &mut Vec<u8>) {
        if self.pending.is_empty() {
            let cut = self.cut_point(input, 0);
            let cut = self.release(input, cut, out);
            self.pending.extend_from_slice(&input[cut..]);
        } else {
            let new_from = self.pending.len();
            self.pending.extend_from_slice(input);
            let data = mem::take(&mut self.pending);
            let cut = self.cut_point(&data, new_from);
            let cut = self.release(&data, cut, out);
            self.pending = data;
            self.pending.drain(..cut);
        }
    }

    /// Ends the stream: appends the rest, redacted, to `out`.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let data = mem::take(&mut self.pending);
        self.release(&data, data.len(), out);
        self.pending = data;
        self.pending.clear();
    }

    /// Markers written so far: one per match, or one for overlapping ones.
    pub fn redactions(&self) -> u64 {
        self.redactions
    }

    /// How much of `data` can be released now; `data[new_from..]` is what just arrived (the
    /// part before it holds no line end that matters).
    fn cut_point(&self, data: &[u8], new_from: usize) -> usize {
        let rules = &self.rules.0;
        let len = data.len();
        if rules.regexes.is_empty() {
            // Literals only: hold back no more than the start of a secret that may be arriving,
            // so output (a progress line without a line end, say) is released as it comes.
            return len - rules.pending_start(data);
        }
        let mut cut = data[new_from..]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| new_from + i + 1);
        if len - cut > LINE_CAP {
            // A secret only partly arrived starts within its length minus one of the end.
            cut = cut.max(len.saturating_sub(rules.longest_literal.saturating_sub(1)));
        }
        cut.min(len.saturating_sub(rules.longest_multiline_literal.saturating_sub(1)))
    }

    /// Appends `data[..cut]` redacted to `out` (with patterns, the cut moved past any match
    /// straddling it) and returns the cut. `data` is searched whole, so a match that straddles
    /// the cut is seen; a literal secret that began before `data` is found from the context.
    fn release(&mut self, data: &[u8], cut: usize, out: &mut Vec<u8>) -> usize {
        if cut == 0 {
            return 0;
        }
        let resumed = Resumed {
            len: self.resumed(data),
            marked: self.tail_marked,
        };
        let rules = &self.rules.0;
        // With literals only, the cut lies before the start of a secret that may still be
        // arriving, and a secret found across it (`abcd` in `abcd|xyz`, with `cdxyz` arriving)
        // is redacted up to the cut: the context finds its rest. A pattern's match is not
        // found again from the context: it goes whole, now.
        let straddle = if rules.regexes.is_empty() {
            Straddle::Cut
        } else {
            Straddle::Take
        };
        let block = redact_block(rules, &mut self.scratch, data, cut, straddle, resumed, out);
        self.redactions += block.redactions;
        self.tail_marked = block.tail_covered;
        let keep = rules.longest_literal.saturating_sub(1);
        extend_context(&mut self.context, &data[..block.cut], keep);
        block.cut
    }

    /// How many bytes at the start of `data` go on a literal secret that began in the context.
    fn resumed(&mut self, data: &[u8]) -> usize {
        let rules = &self.rules.0;
        if self.context.is_empty() {
            return 0;
        }
        // A secret begun in the context ends within its length of it.
        let near = data.len().min(rules.longest_literal.saturating_sub(1));
        self.near.clear();
        self.near.extend_from_slice(&self.context);
        self.near.extend_from_slice(&data[..near]);
        rules.literal_end_past(&self.near, self.context.len(), &mut self.scratch)
    }
}

/// Appends `bytes` to `context` and keeps its last `keep` bytes.
fn extend_context(context: &mut Vec<u8>, bytes: &[u8], keep: usize) {
    if bytes.len() >= keep {
        context.clear();
        context.extend_from_slice(&bytes[bytes.len() - keep..]);
    } else {
        context.extend_from_slice(bytes);
        let excess = context.len().saturating_sub(keep);
        context.drain(..excess);
    }
}

/// What [`redact_block`] does with a match that straddles its cut.
#[derive(Clone, Copy)]
enum Straddle {
    /// Move the cut to the match's end: it goes now, redacted.
    Take,
    /// Keep the cut: the match is redacted up to it, and its rest must be found again (from
    /// the context) in the next block.
    Cut,
}

/// The start of a block that goes on a literal secret begun before it (see
/// [`Compiled::literal_end_past`]).
#[derive(Clone, Copy, Default)]
struct Resumed {
    /// Bytes of the block in that secret.
    len: usize,
    /// A marker was written for the secret's start: its rest needs none.
    marked: bool,
}

/// What [`redact_block`] did.
struct Block {
    /// How much of the data went.
    cut: usize,
    /// Markers written.
    redactions: u64,
    /// The last byte that went lay in a match.
    tail_covered: bool,
}

/// Appends `data[..cut]` to `out` with every match replaced — the first `resumed.len` bytes too,
/// under their secret's marker — after moving `cut` to the end of a match that straddles it if
/// `straddle` says so.
fn redact_block(
    rules: &Compiled,
    scratch: &mut Scratch,
    data: &[u8],
    mut cut: usize,
    straddle: Straddle,
    resumed: Resumed,
    out: &mut Vec<u8>,
) -> Block {
    rules.find_spans(data, scratch);
    let spans = &scratch.spans;
    if let Some(&(_, end)) = spans.iter().find(|&&(start, end)| start < cut && cut < end) {
        if let Straddle::Take = straddle {
            cut = end;
        }
    }
    let mut done = 0;
    let mut redactions = 0;
    let mut tail_covered = false;
    let mut spans = spans
        .iter()
        .take_while(|&&(start, _)| start < cut)
        .peekable();
    if resumed.len > 0 {
        // The secret begun before, with the matches that overlap it (as one span, as if the
        // block went on from there).
        let mut end = resumed.len;
        while let Some(&(_, stop)) = spans.next_if(|&&(start, _)| start < end) {
            end = end.max(stop);
        }
        if !resumed.marked {
            out.extend_from_slice(REDACTED.as_bytes());
            redactions += 1;
        }
        done = end.min(cut);
        tail_covered = end >= cut;
    }
    for &(start, end) in spans {
        out.extend_from_slice(&data[done..start]);
        out.extend_from_slice(REDACTED.as_bytes());
        done = end.min(cut);
        redactions += 1;
        tail_covered = end >= cut;
    }
    out.extend_from_slice(&data[done..cut]);
    Block {
        cut,
        redactions,
        tail_covered,
    }
}

/// A literal as a pattern matching exactly its bytes (which need not be UTF-8).
fn escape_literal(literal: &[u8]) -> String {
    let mut pattern = String::with_capacity(literal.len() * 4 + 6);
    pattern.push_str("(?-u:");
    for &b in literal {
        if b.is_ascii_alphanumeric() {
            pattern.push(char::from(b));
        } else {
            // Writing to a String cannot fail.
            let _ = write!(pattern, "\\x{b:02X}");
        }
    }
    pattern.push(')');
    pattern
}

impl OutputLog {
    /// The log of one attempt, at `path`: the file (mode 0600) is created with the first byte
    /// of output, and that fails if it exists, so an attempt's log is never appended to or
    /// replaced. No output, no file. `limit` bounds the stored output (plus the marker line).
    pub fn create(path: &Path, limit: u64, rules: &RedactRules) -> io::Result<Self> {
        let (live, _) = broadcast::channel(LIVE_CAPACITY);
        Ok(OutputLog {
            path: path.to_path_buf(),
            file: None,
            head_cap: limit / 2,
            tail_cap: limit - limit / 2,
            head_len: 0,
            tail_len: 0,
            ring: None,
            redactor: Redactor::new(rules),
            buf: Vec::new(),
            live,
        })
    }

    /// Takes the next chunk of output, as read: redacts it, sends what is released to live
    /// followers and stores it (head in the file, the rest in the tail ring).
    pub fn write(&mut self, chunk: &[u8]) -> io::Result<()> {
        let mut buf = mem::take(&mut self.buf);
        buf.clear();
        self.redactor.push(chunk, &mut buf);
        let stored = self.accept(&buf);
        self.buf = buf;
        stored
    }

    /// Follows the output from now on.
    pub fn subscribe(&self) -> Subscription {
        Subscription {
            from: self.bytes(),
            chunks: self.live.subscribe(),
        }
    }

    /// The log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes in the log file so far: a reader may read this much of it while the attempt runs.
    pub fn bytes_written_to_head(&self) -> u64 {
        self.head_len
    }

    /// Redacted output accepted so far, stored or not.
    pub fn bytes(&self) -> u64 {
        self.head_len + self.tail_len
    }

    /// Output taken but not yet passed on, held back for a secret or a line that may still be
    /// completing. After each write, however the output goes on: with literal secrets only,
    /// at most the start of one (the longest secret less one byte); with patterns, an
    /// unfinished line of up to [`LINE_CAP`] (or a secret's start, if a secret is longer).
    /// The last bytes passed on (the longest secret less one) are kept besides, as context.
    pub fn held_back(&self) -> usize {
        self.redactor.pending.len()
    }

    /// Ends the output: releases what the redactor still holds, then appends the marker (if
    /// anything was dropped) and the tail to the file, and syncs it.
    pub fn finish(mut self) -> io::Result<OutputSummary> {
        let mut buf = mem::take(&mut self.buf);
        buf.clear();
        self.redactor.finish(&mut buf);
        self.accept(&buf)?;
        let omitted = self.tail_len.saturating_sub(self.tail_cap);
        if let Some(file) = self.file.as_mut() {
            if omitted > 0 {
                write!(file, "\n[spoold: {omitted} bytes of output omitted]\n")?;
            }
            if let Some(ring) = &self.ring {
                if omitted == 0 {
                    copy_range(ring, 0, self.tail_len, file)?;
                } else {
                    // The oldest kept byte is where the next one would have gone.
                    let start = self.tail_len % self.tail_cap;
                    copy_range(ring, start, self.tail_cap - start, file)?;
                    copy_range(ring, 0, start, file)?;
                }
            }
            file.sync_data()?;
        }
        Ok(OutputSummary {
            bytes: self.bytes(),
            truncated_bytes: omitted,
            redactions: self.redactor.redactions(),
        })
    }

    /// Sends redacted output to followers and stores it.
    fn accept(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        if self.live.receiver_count() > 0 {
            for piece in data.chunks(LIVE_CHUNK) {
                // No receiver left in between is fine: nobody is following.
                let _ = self.live.send(Bytes::copy_from_slice(piece));
            }
        }
        let room = usize::try_from(self.head_cap - self.head_len).unwrap_or(usize::MAX);
        let (head, tail) = data.split_at(data.len().min(room));
        if !head.is_empty() {
            if self.file.is_none() {
                self.file = Some(
                    OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(&self.path)?,
                );
            }
            if let Some(file) = self.file.as_mut() {
                file.write_all(head)?;
            }
            self.head_len += head.len() as u64;
        }
        if !tail.is_empty() {
            self.write_tail(tail)?;
        }
        Ok(())
    }

    /// Writes into the ring: the byte at tail offset `o` lives at `o % tail_cap`.
    fn write_tail(&mut self, data: &[u8]) -> io::Result<()> {
        let offset = self.tail_len;
        self.tail_len += data.len() as u64;
        let cap = self.tail_cap;
        if cap == 0 {
            return Ok(());
        }
        // Only the last `cap` bytes of `data` can survive.
        let skip = data
            .len()
            .saturating_sub(usize::try_from(cap).unwrap_or(usize::MAX));
        let data = &data[skip..];
        let pos = (offset + skip as u64) % cap;
        let first = data
            .len()
            .min(usize::try_from(cap - pos).unwrap_or(usize::MAX));
        let ring = self.ring()?;
        ring.write_all_at(&data[..first], pos)?;
        ring.write_all_at(&data[first..], 0)
    }

    fn ring(&mut self) -> io::Result<&File> {
        if self.ring.is_none() {
            let mut name = self.path.clone().into_os_string();
            name.push(".tail");
            let path = PathBuf::from(name);
            // Only a crash between create and unlink below leaves one behind.
            match fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)?;
            fs::remove_file(&path)?;
            self.ring = Some(file);
        }
        Ok(self.ring.as_ref().expect("just set"))
    }
}

/// Appends `len` bytes of `from`, starting at `start`, to `to`.
fn copy_range(mut from: &File, start: u64, len: u64, to: &mut File) -> io::Result<()> {
    from.seek(SeekFrom::Start(start))?;
    let copied = io::copy(&mut from.take(len), to)?;
    if copied != len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "output tail shorter than recorded",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn rules(literals: &[&str], regexes: &[&str]) -> RedactRules {
        let regexes: Vec<String> = regexes.iter().map(|r| r.to_string()).collect();
        RedactRules::new(
            literals.iter().map(|l| l.as_bytes().to_vec()).collect(),
            &regexes,
        )
        .expect("valid rules")
    }

    /// Feeds `pieces` through one redactor, returns the output and the redaction count.
    fn stream(rules: &RedactRules, pieces: &[&[u8]]) -> (String, u64) {
        let mut r = Redactor::new(rules);
        let mut out = Vec::new();
        for p in pieces {
            r.push(p, &mut out);
        }
        r.finish(&mut out);
        (String::from_utf8(out).expect("utf-8"), r.redactions())
    }

    /// With literal secrets only, what comes in the same read before the start of a secret
    /// that may be arriving is released (and stored) at once: only the start is held, and only
    /// that is lost if the daemon dies before the rest comes.
    #[test]
    fn only_a_secret_start_is_held_back() {
        let r = rules(&["SECRET-VALUE"], &[]);
        let mut red = Redactor::new(&r);
        let mut out = Vec::new();
        red.push(b"hello world SECR", &mut out);
        assert_eq!(String::from_utf8_lossy(&out), "hello world ");
        assert_eq!(red.pending, b"SECR");
    }

    #[test]
    fn redacts_table() {
        fn check(literals: &[&str], regexes: &[&str], input: &str, expected: &str) {
            let (got, _) = stream(&rules(literals, regexes), &[input.as_bytes()]);
            assert_eq!(got, expected, "input {input:?}");
        }
        check(&["s3cr3t"], &[], "a s3cr3t b\n", "a [REDACTED] b\n");
        check(&["s3cr3t"], &[], "s3cr3ts3cr3t", "[REDACTED][REDACTED]");
        check(
            &[],
            &["(?i)password=\\S+"],
            "x PassWord=hunter2 y\n",
            "x [REDACTED] y\n",
        );
        check(
            &["tok"],
            &["t[0-9]+"],
            "t12 tok t3\n",
            "[REDACTED] [REDACTED] [REDACTED]\n",
        );
        // One secret a prefix of another: the longer one is redacted whole.
        check(
            &["abc", "abcdef"],
            &[],
            "abcdef abc abcd\n",
            "[REDACTED] [REDACTED] [REDACTED]d\n",
        );
        // Overlapping secrets: the union goes.
        check(&["abcd", "cdef"], &[], "xabcdefx\n", "x[REDACTED]x\n");
        check(&["aa"], &[], "aaa\n", "[REDACTED]\n");
        // A regex match overlapping a literal one: the union goes.
        check(&["key"], &["y=\\S+"], "key=v1 z\n", "[REDACTED] z\n");
        check(&["x"], &[], "", "");
        check(
            &["multi\nline"],
            &[],
            "a multi\nline b\n",
            "a [REDACTED] b\n",
        );
    }

    #[test]
    fn secret_split_at_every_position() {
        let rules = rules(&["s3cr3t-value", "other"], &["(?i)password=\\S+"]);
        let text = b"one s3cr3t-value two password=hunter2 three other\n";
        for i in 0..=text.len() {
            for j in i..=text.len() {
                let (got, n) = stream(&rules, &[&text[..i], &text[i..j], &text[j..]]);
                assert_eq!(
                    got, "one [REDACTED] two [REDACTED] three [REDACTED]\n",
                    "split at {i}, {j}"
                );
                assert_eq!(n, 3);
            }
        }
    }

    /// Two secrets that overlap (`abcd`, `cdxyz`), cut where the second has only begun: the
    /// first is held whole until the second is complete, as in one piece.
    #[test]
    fn overlapping_secrets_split_between_them() {
        let r = rules(&["abcd", "cdxyz"], &[]);
        let whole = stream(&r, &[b"abcdxyz\n"]);
        assert_eq!(whole.0, "[REDACTED]\n");
        for cut in 1..8 {
            let (a, b) = b"abcdxyz\n".split_at(cut);
            assert_eq!(stream(&r, &[a, b]), whole, "cut at {cut}");
        }
    }

    #[test]
    fn one_byte_writes() {
        let rules = rules(&["s3cr3t", "multi\nline"], &["(?i)password=\\S+"]);
        let text = b"s3cr3t\nPASSWORD=x y\nmulti\nline\nend s3cr";
        let pieces: Vec<&[u8]> = text.chunks(1).collect();
        let (got, n) = stream(&rules, &pieces);
        assert_eq!(got, "[REDACTED]\n[REDACTED] y\n[REDACTED]\nend s3cr");
        assert_eq!(n, 3);
    }

    #[test]
    fn long_line_secret_straddles_cut() {
        let secret = "0123456789abcdef-secret";
        let rules = rules(&[secret], &[]);
        // A line well over the cap, the secret placed around where the first cut falls.
        for at in (LINE_CAP - 40)..(LINE_CAP + 40) {
            let mut line = vec![b'x'; LINE_CAP + 200];
            line[at..at + secret.len()].copy_from_slice(secret.as_bytes());
            let mut expected = line[..at].to_vec();
            expected.extend_from_slice(REDACTED.as_bytes());
            expected.extend_from_slice(&line[at + secret.len()..]);
            for size in [1, 7, 4096, line.len()] {
                let mut r = Redactor::new(&rules);
                let mut out = Vec::new();
                for piece in line.chunks(size) {
                    r.push(piece, &mut out);
                }
                assert!(!out.is_empty(), "a line over the cap is released in part");
                assert!(r.pending.len() < LINE_CAP + size + secret.len());
                r.finish(&mut out);
                assert!(out == expected, "secret at {at}, pieces of {size}");
                assert_eq!(r.redactions(), 1);
            }
        }
    }

    #[test]
    fn large_pieces_in_two_parts_as_in_small_ones() {
        let rules = rules(&["s3cr3t-value", "other"], &["(?i)password=\\S+"]);
        let mut text = Vec::new();
        for i in 0..40_000 {
            text.extend_from_slice(
                format!("line {i} s3cr3t-value password=hunter{i} other\n").as_bytes(),
            );
        }
        text.extend_from_slice(b"unfinished s3cr3t-va");
        assert!(text.len() > 2 * PARALLEL_MIN);
        let small: Vec<&[u8]> = text.chunks(4096).collect();
        let expected = stream(&rules, &small);
        assert_eq!(expected.1, 120_000);
        // Something pending (or not) before the large piece, an incomplete line after it.
        for first in [0, 7, 1000, 5000] {
            let mut r = Redactor::new(&rules);
            let mut out = Vec::new();
            r.push(&text[..first], &mut out);
            r.push(&text[first..text.len() - 9], &mut out);
            assert_eq!(r.helper.is_some(), rules.0.parallel, "split in two");
            r.push(&text[text.len() - 9..], &mut out);
            r.finish(&mut out);
            let got = (String::from_utf8(out).expect("utf-8"), r.redactions());
            assert!(got == expected, "first push of {first} bytes");
        }
        // A literal holding a line end may straddle the cut: no split, same result.
        let multi = self::rules(&["value password", "other\nline"], &[]);
        let mut r = Redactor::new(&multi);
        let mut out = Vec::new();
        r.push(&text, &mut out);
        r.finish(&mut out);
        assert!(r.helper.is_none());
        assert!(out == stream(&multi, &small).0.into_bytes());
    }

    #[test]
    fn empty_literal_ignored_and_bad_patterns_rejected() {
        let empty = RedactRules::new(vec![Vec::new()], &[]).expect("valid");
        assert!(empty.is_empty());
        assert_eq!(stream(&empty, &[b"abc"]), ("abc".to_owned(), 0));
        assert!(matches!(
            RedactRules::new(Vec::new(), &["(".to_owned()]),
            Err(RuleError::InvalidPattern { .. })
        ));
        assert!(matches!(
            RedactRules::new(Vec::new(), &["x*".to_owned()]),
            Err(RuleError::MatchesEmpty { .. })
        ));
    }

    #[test]
    fn non_utf8_literal_and_debug_hides_secrets() {
        let rules = RedactRules::new(vec![b"\xff\x00(.*)".to_vec()], &[]).expect("valid");
        let (got, n) = {
            let mut r = Redactor::new(&rules);
            let mut out = Vec::new();
            r.push(b"a\xff\x00(.*)b \xff\x00(x)\n", &mut out);
            r.finish(&mut out);
            (out, r.redactions())
        };
        assert_eq!(got, b"a[REDACTED]b \xff\x00(x)\n");
        assert_eq!(n, 1);
        let shown = format!("{:?}", self::rules(&["hunter2"], &[]));
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn redact_all_short_text() {
        let rules = rules(&["hunter2"], &["token=\\w+"]);
        assert_eq!(
            redact_all(&rules, "login with hunter2 failed; token=abc"),
            "login with [REDACTED] failed; [REDACTED]"
        );
        assert_eq!(redact_all(&RedactRules::default(), "as is"), "as is");
    }

    /// `count` numbered lines, 12 bytes each.
    fn numbered(count: usize) -> Vec<u8> {
        (0..count)
            .flat_map(|i| format!("line {i:06}\n").into_bytes())
            .collect()
    }

    fn log_of(limit: u64, rules: &RedactRules, writes: &[&[u8]]) -> (Vec<u8>, OutputSummary) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("attempt.log");
        let mut log = OutputLog::create(&path, limit, rules).expect("create");
        for chunk in writes {
            log.write(chunk).expect("write");
        }
        let summary = log.finish().expect("finish");
        let names: Vec<_> = fs::read_dir(dir.path())
            .expect("read dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        if summary.bytes == 0 {
            assert!(names.is_empty(), "no output, no file: {names:?}");
            return (Vec::new(), summary);
        }
        assert_eq!(names, ["attempt.log"], "the ring file is gone");
        (fs::read(&path).expect("read log"), summary)
    }

    #[test]
    fn head_and_tail_with_marker() {
        let output = numbered(10_000);
        for (limit, size) in [
            (1000, 1),
            (1000, 12),
            (1000, 999),
            (1000, 5000),
            (1001, 4096),
            (4, 100_000),
        ] {
            let writes: Vec<_> = output.chunks(size).collect();
            let (stored, summary) = log_of(limit, &RedactRules::default(), &writes);
            let head = (limit / 2) as usize;
            let tail = limit as usize - head;
            let omitted = output.len() - head - tail;
            let mut expected = output[..head].to_vec();
            expected.extend_from_slice(
                format!("\n[spoold: {omitted} bytes of output omitted]\n").as_bytes(),
            );
            expected.extend_from_slice(&output[output.len() - tail..]);
            assert!(stored == expected, "limit {limit}, writes of {size}");
            assert_eq!(
                summary,
                OutputSummary {
                    bytes: output.len() as u64,
                    truncated_bytes: omitted as u64,
                    redactions: 0
                }
            );
        }
    }

    #[test]
    fn no_truncation_up_to_the_limit() {
        let output = numbered(100);
        for limit in [output.len() as u64, output.len() as u64 + 1, 1 << 20] {
            let writes: Vec<_> = output.chunks(100).collect();
            let (stored, summary) = log_of(limit, &RedactRules::default(), &writes);
            assert!(stored == output, "limit {limit}");
            assert_eq!(summary.truncated_bytes, 0);
        }
        let (stored, summary) = log_of(100, &RedactRules::default(), &[]);
        assert!(stored.is_empty());
        assert_eq!(summary.bytes, 0);
    }

    #[test]
    fn redacted_before_truncation() {
        let rules = rules(&["s3cr3t"], &[]);
        let output = b"aaaa s3cr3t bbbb s3cr3t cccc\n".repeat(50);
        let writes: Vec<_> = output.chunks(3).collect();
        let (stored, summary) = log_of(200, &rules, &writes);
        assert!(!stored.windows(6).any(|w| w == b"s3cr3t"));
        assert_eq!(summary.redactions, 100);
        assert_eq!(
            summary.bytes,
            output.len() as u64 + 100 * (REDACTED.len() as u64 - 6)
        );
    }

    /// A secret cut into three writes at every pair of positions (the middle one empty, too):
    /// stored as in one write, counted once — with literal secrets only, and with a pattern
    /// too (which holds the line).
    #[test]
    fn a_secret_split_across_writes_is_never_stored() {
        const SECRET: &[u8] = b"s3cr3t-XYZ";
        let literal = rules(&["s3cr3t-XYZ"], &[]);
        let patterned = rules(&["s3cr3t-XYZ"], &["pw=\\S+"]);
        for rules in [&literal, &patterned] {
            for i in 1..SECRET.len() {
                for j in i..SECRET.len() {
                    let writes = [
                        &b"start "[..],
                        &SECRET[..i],
                        &SECRET[i..j],
                        &SECRET[j..],
                        b" end\n",
                    ];
                    let (stored, summary) = log_of(1 << 20, rules, &writes);
                    assert_eq!(
                        String::from_utf8_lossy(&stored),
                        "start [REDACTED] end\n",
                        "cut at {i}, {j}"
                    );
                    assert_eq!(summary.redactions, 1, "cut at {i}, {j}");
                }
            }
        }
    }

    /// Literal secrets and patterns are searched in the same bytes: a secret inside a pattern's
    /// match, or overlapping one, goes under one marker with it and is counted once (as in
    /// [`redact_all`]), wherever the writes were cut.
    #[test]
    fn a_secret_in_a_pattern_match_is_one_redaction() {
        for (literal, pattern, output, expected) in [
            (
                "s3cr3t",
                "pw=\\S+",
                "out pw=s3cr3t done\n",
                "out [REDACTED] done\n",
            ),
            (
                "cdef",
                "pw=[a-c]+",
                "out pw=abcdef done\n",
                "out [REDACTED] done\n",
            ),
        ] {
            let rules = rules(&[literal], &[pattern]);
            assert_eq!(redact_all(&rules, output), expected);
            let bytes = output.as_bytes();
            for cut in 0..=bytes.len() {
                let (head, tail) = bytes.split_at(cut);
                let (stored, summary) = log_of(1 << 20, &rules, &[head, tail]);
                assert_eq!(String::from_utf8_lossy(&stored), expected, "cut at {cut}");
                assert_eq!(summary.redactions, 1, "{output:?} cut at {cut}");
            }
        }
    }

    /// Writes `writes` to a log (1 MiB limit), checking after each write that at most `bound`
    /// bytes are held back (and that the context is shorter than the longest secret, `longest`).
    fn bounded_log(
        rules: &RedactRules,
        writes: &[&[u8]],
        bound: usize,
        longest: usize,
    ) -> (Vec<u8>, OutputSummary) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("attempt.log");
        let mut log = OutputLog::create(&path, 1 << 20, rules).expect("create");
        for (n, chunk) in writes.iter().enumerate() {
            log.write(chunk).expect("write");
            assert!(
                log.held_back() <= bound,
                "{} bytes held back after write {n} (of {} bytes), bound {bound}",
                log.held_back(),
                chunk.len()
            );
            assert!(log.redactor.context.len() < longest.max(1));
        }
        let summary = log.finish().expect("finish");
        (fs::read(&path).unwrap_or_default(), summary)
    }

    /// `start `, then `ab` over and over, far past [`LINE_CAP`] without a line end, then ` end`.
    fn chain() -> Vec<u8> {
        let mut output = b"start ".to_vec();
        output.extend_from_slice(&b"ab".repeat(LINE_CAP + 501));
        output.extend_from_slice(b" end\n");
        output
    }

    /// How the tests below cut output into writes: pieces of these sizes, in turn.
    const WRITE_SIZES: [&[usize]; 5] = [&[1, 2, 3, 5, 8], &[2], &[7], &[4096], &[LINE_CAP + 3]];

    /// `bytes` cut into pieces of `sizes`, taken in turn.
    fn pieces<'a>(mut bytes: &'a [u8], sizes: &[usize]) -> Vec<&'a [u8]> {
        let mut out = Vec::new();
        for &size in sizes.iter().cycle() {
            if bytes.is_empty() {
                break;
            }
            let (piece, rest) = bytes.split_at(size.min(bytes.len()));
            out.push(piece);
            bytes = rest;
        }
        out
    }

    /// What is left of stored output without its markers.
    fn stripped(stored: &[u8]) -> String {
        String::from_utf8(stored.to_vec())
            .expect("utf-8")
            .replace(REDACTED, "")
    }

    /// A task printing a secret that overlaps itself (`aba`, `abab`) over and over with no line
    /// end: every copy overlaps the next, so the secrets found make one span that reaches the
    /// end of what is pending. It is not held whole (that held the whole output in memory): only
    /// a secret's start is held at any time, the rest goes redacted, a secret straddling a cut is
    /// found again from the context, and the output is the same whatever the writes — one
    /// marker for the whole chain, counted once.
    #[test]
    fn a_chain_of_overlapping_secrets_is_redacted_in_bounded_memory() {
        let output = chain();
        for (secret, expected) in [
            ("aba", "start [REDACTED]b end\n"),
            ("abab", "start [REDACTED] end\n"),
        ] {
            let literal = rules(&[secret], &[]);
            let patterned = rules(&[secret], &["k[0-9]+s"]);
            for (rules, bound) in [
                // Literals only: a secret's start at most.
                (&literal, secret.len() - 1),
                // With a pattern, an unfinished line (of up to LINE_CAP) instead.
                (&patterned, LINE_CAP),
            ] {
                let (whole, summary) = bounded_log(rules, &[&output], bound, secret.len());
                assert_eq!(String::from_utf8_lossy(&whole), expected);
                assert_eq!(summary.redactions, 1, "one chain, one redaction");
                for sizes in WRITE_SIZES {
                    let writes = pieces(&output, sizes);
                    let (stored, cut_summary) = bounded_log(rules, &writes, bound, secret.len());
                    assert!(
                        stored == whole,
                        "{secret}, writes of {sizes:?}: {:?}",
                        String::from_utf8_lossy(&stored[..stored.len().min(200)])
                    );
                    assert_eq!(cut_summary, summary, "{secret}, writes of {sizes:?}");
                }
            }
        }
    }

    /// The chain through one [`Redactor`], literals alone or with a pattern: a literal secret
    /// straddling a cut (a line is cut at [`LINE_CAP`]) is found again from the context, so the
    /// output does not depend on the pieces, and at most a secret's start (or a line) is held.
    #[test]
    fn a_redactor_cuts_a_chain_of_overlapping_secrets_without_letting_a_piece_out() {
        let output = chain();
        for (secret, expected) in [
            ("aba", "start [REDACTED]b end\n"),
            ("abab", "start [REDACTED] end\n"),
        ] {
            for (rules, bound) in [
                (rules(&[secret], &[]), secret.len() - 1),
                (rules(&[secret], &["k[0-9]+s"]), LINE_CAP),
            ] {
                for sizes in WRITE_SIZES {
                    let mut r = Redactor::new(&rules);
                    let mut out = Vec::new();
                    for piece in pieces(&output, sizes) {
                        r.push(piece, &mut out);
                        assert!(r.pending.len() <= bound, "{secret}, {sizes:?}");
                    }
                    r.finish(&mut out);
                    let left = stripped(&out);
                    assert!(
                        String::from_utf8_lossy(&out) == expected,
                        "{secret}, writes of {sizes:?}: {:?}",
                        &left[..left.len().min(100)]
                    );
                    assert_eq!(r.redactions(), 1);
                }
            }
        }
    }

    /// A pattern that keeps matching to the end (no line end in sight) is held no longer than
    /// [`LINE_CAP`]: the line is then redacted in pieces (a match straddling a piece's end may
    /// be missed there, as the module says).
    #[test]
    fn a_pattern_that_keeps_matching_is_held_no_longer_than_a_line() {
        let output = chain();
        let rules = rules(&[], &["(?:ab)+"]);
        for size in [7, 4096, LINE_CAP + 3] {
            let writes: Vec<_> = output.chunks(size).collect();
            let (stored, _) = bounded_log(&rules, &writes, LINE_CAP, 0);
            let left = stripped(&stored);
            assert!(
                left.starts_with("start ") && left.ends_with(" end\n") && left.len() < 32,
                "writes of {size}: {left:?}"
            );
        }
    }

    #[test]
    fn file_mode_followers_and_no_clobbering() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("attempt.log");
        let rules = rules(&["s3cr3t"], &[]);
        let mut log = OutputLog::create(&path, 10, &rules).expect("create");
        assert!(!path.exists(), "no file before the first byte of output");
        log.write(b"before\n").expect("write");
        let mode = fs::metadata(&path).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let mut follow = log.subscribe();
        assert_eq!(follow.from, 7);
        log.write(b"a s3cr3t").expect("write");
        log.write(b" b\n").expect("write");
        assert_eq!(log.bytes_written_to_head(), 5);
        assert_eq!(log.path(), path);
        let mut clobber = OutputLog::create(&path, 10, &rules).expect("create");
        assert!(
            clobber.write(b"x\n").is_err(),
            "an existing log is never appended to"
        );
        log.finish().expect("finish");
        let mut followed = Vec::new();
        loop {
            match follow.chunks.try_recv() {
                Ok(chunk) => followed.extend_from_slice(&chunk),
                Err(broadcast::error::TryRecvError::Closed) => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(followed, b"a [REDACTED] b\n");
    }
}
