//! The seed's PagedAttn op (fuel-graph 0.23.0) run from Rust through tilec's C ABI
//! (runtime/tilec.h, declared by hand below), on the CPU emulator, from a folder written by
//! `tilec autotune paged_attention ... --export DIR`. Inputs follow the seed's conventions:
//! q `[B, Hq, Sq, D]`, k_cache and v_cache `[num_blocks, block_size, Hkv, D]`, a `u32` block
//! table `[B, max_blocks]` and `u32` context lengths `[B]`, optional ALiBi slopes `[Hq]`.
//! Each run is checked against a small reference written here.
//!
//! Usage: tilec-rust-host DEPLOY_DIR [emulate|cuda|auto]
//!
//! With `--rmsnorm DEPLOY_DIR ROWS COLS` it runs the tutorial's kernel instead (docs/TUTORIAL.md,
//! examples/rmsnorm): a user's own kernel by name, from the folder `tilec db export` wrote, on f16
//! arrays, every value checked against RMSNorm computed in double.
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_double, c_int, c_void}; // std::ffi has them from Rust 1.64; Debian 12 ships 1.63
use std::process::ExitCode;
use std::ptr;

// runtime/tilec.h, ABI version 1.
const TILEC_ABI_VERSION: c_int = 1;
const TILEC_OK: c_int = 0;
const TILEC_F32: c_int = 0;
const TILEC_F16: c_int = 1;
const TILEC_U32: c_int = 11;

#[repr(C)]
struct TilecTensor {
    name: *const c_char,
    data: *mut c_void,
    dtype: c_int,
    ndim: c_int,
    shape: *const i64,
    strides: *const i64,
}

#[repr(C)]
struct TilecScalar {
    name: *const c_char,
    value: c_double,
}

#[repr(C)]
struct TilecValue {
    name: *const c_char,
    value: i64,
    string: *const c_char,
}

#[repr(C)]
struct TilecArgs {
    tensors: *const TilecTensor,
    num_tensors: usize,
    scalars: *const TilecScalar,
    num_scalars: usize,
    sizes: *const TilecValue,
    num_sizes: usize,
    config: *const TilecValue,
    num_config: usize,
}

#[repr(C)]
struct TilecStore {
    _private: [u8; 0],
}
#[repr(C)]
struct TilecOp {
    _private: [u8; 0],
}
#[repr(C)]
struct TilecCall {
    _private: [u8; 0],
}

extern "C" {
    fn tilec_abi_version() -> c_int;
    fn tilec_last_error() -> *const c_char;
    fn tilec_store_open(dir: *const c_char, backend: *const c_char, out: *mut *mut TilecStore) -> c_int;
    fn tilec_store_close(store: *mut TilecStore);
    fn tilec_store_op(store: *const TilecStore, name: *const c_char, out: *mut *const TilecOp) -> c_int;
    fn tilec_op_prepare(op: *const TilecOp, args: *const TilecArgs, out: *mut *mut TilecCall) -> c_int;
    fn tilec_call_destroy(call: *mut TilecCall);
    fn tilec_call_note(call: *const TilecCall) -> *const c_char;
    fn tilec_call_value(call: *const TilecCall, name: *const c_char, value: *mut i64) -> c_int;
    fn tilec_call_num_launches(call: *const TilecCall) -> c_int;
    fn tilec_call_run(call: *const TilecCall, workspace: *mut c_void, bytes: usize, stream: *mut c_void) -> c_int;
}

/// The calling thread's last error, as a Rust string.
fn last_error() -> String {
    unsafe { CStr::from_ptr(tilec_last_error()).to_string_lossy().into_owned() }
}

fn check(status: c_int, what: &str) -> Result<(), String> {
    if status == TILEC_OK {
        Ok(())
    } else {
        Err(format!("{what}: {}", last_error()))
    }
}

/// The seed's PagedAttn inputs.
struct PagedAttn {
    b: usize,
    hq: usize,
    hkv: usize,
    sq: usize,
    d: usize,
    block_size: usize,
    max_blocks: usize,
    num_blocks: usize,
    q: Vec<f32>,
    k_cache: Vec<f32>,
    v_cache: Vec<f32>,
    block_table: Vec<u32>,
    context_lens: Vec<u32>,
    alibi_slopes: Option<Vec<f32>>,
    softmax_scale: f32,
}

/// xorshift64, uniform in [-1, 1).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32
    }
}

impl PagedAttn {
    fn new(alibi: bool, seed: u64) -> Self {
        let (b, hq, hkv, sq, d, block_size, max_blocks, num_blocks) = (4, 8, 2, 1, 32, 8, 8, 40);
        let mut rng = Rng(seed);
        let mut fill = |n: usize| (0..n).map(|_| rng.next()).collect::<Vec<f32>>();
        let q = fill(b * hq * sq * d);
        let k_cache = fill(num_blocks * block_size * hkv * d);
        let v_cache = fill(num_blocks * block_size * hkv * d);
        // Pages scattered over the cache; contexts full, ending inside a page, one token, empty.
        let context_lens = vec![64u32, 37, 1, 0];
        let mut block_table = vec![u32::MAX; b * max_blocks]; // entries past the live pages are never read
        for s in 0..b {
            let live = (context_lens[s] as usize + block_size - 1) / block_size;
            for j in 0..live {
                block_table[s * max_blocks + j] = ((s * max_blocks + j) * 13 % num_blocks) as u32;
            }
        }
        let alibi_slopes = alibi.then(|| (1..=hq).map(|h| (-8.0 * h as f32 / hq as f32).exp2()).collect());
        let softmax_scale = 1.0 / (d as f32).sqrt();
        PagedAttn { b, hq, hkv, sq, d, block_size, max_blocks, num_blocks, q, k_cache, v_cache, block_table,
                    context_lens, alibi_slopes, softmax_scale }
    }

    /// out[b, h, i] = softmax_j(scale q.k_j + slope_h (j - i)) v_j over j < context_lens[b].
    fn reference(&self) -> Vec<f32> {
        let (d, group) = (self.d, self.hq / self.hkv);
        let mut out = vec![0f32; self.q.len()];
        for b in 0..self.b {
            let len = self.context_lens[b] as usize;
            for h in 0..self.hq {
                let kvh = h / group;
                for i in 0..self.sq {
                    let row = ((b * self.hq + h) * self.sq + i) * d;
                    let slot = |j: usize| {
                        let page = self.block_table[b * self.max_blocks + j / self.block_size] as usize;
                        ((page * self.block_size + j % self.block_size) * self.hkv + kvh) * d
                    };
                    let scores: Vec<f64> = (0..len)
                        .map(|j| {
                            let k = &self.k_cache[slot(j)..slot(j) + d];
                            let dot: f64 = (0..d).map(|x| self.q[row + x] as f64 * k[x] as f64).sum();
                            let bias = self.alibi_slopes.as_ref().map_or(0.0, |s| s[h] as f64 * (j as f64 - i as f64));
                            dot * self.softmax_scale as f64 + bias
                        })
                        .collect();
                    let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let sum: f64 = scores.iter().map(|s| (s - m).exp()).sum();
                    for (j, s) in scores.iter().enumerate() {
                        let p = (s - m).exp() / sum;
                        let v = &self.v_cache[slot(j)..slot(j) + d];
                        for x in 0..d {
                            out[row + x] += (p * v[x] as f64) as f32;
                        }
                    }
                }
            }
        }
        out
    }
}

/// Runs the op on `p` through the C ABI; returns the output and the number of KV splits used.
fn run(op: *const TilecOp, p: &mut PagedAttn) -> Result<(Vec<f32>, i64), String> {
    let mut out = vec![0f32; p.q.len()];
    let q_shape = [p.b as i64, p.hq as i64, p.sq as i64, p.d as i64];
    let kv_shape = [p.num_blocks as i64, p.block_size as i64, p.hkv as i64, p.d as i64];
    let bt_shape = [p.b as i64, p.max_blocks as i64];
    let cl_shape = [p.b as i64];
    let names: Vec<CString> = ["q", "k_cache", "v_cache", "block_table", "context_lens", "out", "alibi_slopes",
                               "softmax_scale", "num_splits"]
        .iter()
        .map(|s| CString::new(*s).unwrap())
        .collect();
    let tensor = |name: usize, data: *mut c_void, dtype: c_int, shape: &[i64]| TilecTensor {
        name: names[name].as_ptr(), data, dtype, ndim: shape.len() as c_int, shape: shape.as_ptr(), strides: ptr::null(),
    };
    let hq_shape = [p.hq as i64];
    let mut tensors = vec![
        tensor(0, p.q.as_mut_ptr().cast(), TILEC_F32, &q_shape),
        tensor(1, p.k_cache.as_mut_ptr().cast(), TILEC_F32, &kv_shape),
        tensor(2, p.v_cache.as_mut_ptr().cast(), TILEC_F32, &kv_shape),
        tensor(3, p.block_table.as_mut_ptr().cast(), TILEC_U32, &bt_shape),
        tensor(4, p.context_lens.as_mut_ptr().cast(), TILEC_U32, &cl_shape),
        tensor(5, out.as_mut_ptr().cast(), TILEC_F32, &q_shape),
    ];
    if let Some(slopes) = p.alibi_slopes.as_mut() {
        tensors.push(tensor(6, slopes.as_mut_ptr().cast(), TILEC_F32, &hq_shape));
    }
    let scalars = [TilecScalar { name: names[7].as_ptr(), value: p.softmax_scale as c_double }];
    let args = TilecArgs {
        tensors: tensors.as_ptr(), num_tensors: tensors.len(), scalars: scalars.as_ptr(), num_scalars: 1,
        sizes: ptr::null(), num_sizes: 0, config: ptr::null(), num_config: 0,
    };
    let mut call: *mut TilecCall = ptr::null_mut();
    check(unsafe { tilec_op_prepare(op, &args, &mut call) }, "tilec_op_prepare")?;
    let mut splits = 0i64;
    let result = (|| {
        check(unsafe { tilec_call_value(call, names[8].as_ptr(), &mut splits) }, "tilec_call_value")?;
        let note = unsafe { CStr::from_ptr(tilec_call_note(call)) }.to_string_lossy().into_owned();
        println!("  {} launches; {note}", unsafe { tilec_call_num_launches(call) });
        // The emulator allocates the split-KV workspace itself when given none.
        check(unsafe { tilec_call_run(call, ptr::null_mut(), 0, ptr::null_mut()) }, "tilec_call_run")
    })();
    unsafe { tilec_call_destroy(call) };
    result.map(|_| (out, splits))
}

/// f16 bits of a value f16 holds exactly (here: multiples of 1/256 below 2 in magnitude).
fn f16_bits(v: f32) -> u16 {
    let sign: u16 = if v < 0.0 { 0x8000 } else { 0 };
    let a = v.abs();
    if a == 0.0 {
        return sign;
    }
    let e = a.log2().floor() as i32; // a = 1.m * 2^e
    let m = a / (e as f32).exp2() - 1.0;
    sign | (((e + 15) as u16) << 10) | (m * 1024.0) as u16
}

fn f16_value(h: u16) -> f64 {
    let (e, m) = (((h >> 10) & 31) as i32, (h & 1023) as f64);
    let v = if e == 0 { m * (-24f64).exp2() } else { (1024.0 + m) * ((e - 25) as f64).exp2() };
    if h & 0x8000 != 0 { -v } else { v }
}

/// The tutorial's rmsnorm by name through the C ABI; true when every value matches.
fn rmsnorm(dir: &str, rows: usize, cols: usize) -> Result<bool, String> {
    let eps = 1e-5f32;
    let mut x: Vec<u16> = (0..rows * cols).map(|i| f16_bits(((i * 37) % 401) as f32 / 256.0 - 200.0 / 256.0)).collect();
    let mut w: Vec<u16> = (0..cols).map(|j| f16_bits((j % 9 + 1) as f32 / 8.0)).collect();
    let mut out = vec![0u16; rows * cols];
    let (dir, backend, name) = (CString::new(dir).unwrap(), CString::new("emulate").unwrap(), CString::new("rmsnorm").unwrap());
    let mut store: *mut TilecStore = ptr::null_mut();
    let mut op: *const TilecOp = ptr::null();
    check(unsafe { tilec_store_open(dir.as_ptr(), backend.as_ptr(), &mut store) }, "tilec_store_open")?;
    let names: Vec<CString> = ["x", "w", "out", "eps"].iter().map(|s| CString::new(*s).unwrap()).collect();
    let (x_shape, w_shape) = ([rows as i64, cols as i64], [cols as i64]);
    let tensor = |name: usize, data: *mut c_void, shape: &[i64]| TilecTensor {
        name: names[name].as_ptr(), data, dtype: TILEC_F16, ndim: shape.len() as c_int, shape: shape.as_ptr(),
        strides: ptr::null(),
    };
    let tensors = [tensor(0, x.as_mut_ptr().cast(), &x_shape), tensor(1, w.as_mut_ptr().cast(), &w_shape),
                   tensor(2, out.as_mut_ptr().cast(), &x_shape)];
    let scalars = [TilecScalar { name: names[3].as_ptr(), value: eps as c_double }];
    let args = TilecArgs {
        tensors: tensors.as_ptr(), num_tensors: 3, scalars: scalars.as_ptr(), num_scalars: 1, sizes: ptr::null(),
        num_sizes: 0, config: ptr::null(), num_config: 0,
    };
    let mut call: *mut TilecCall = ptr::null_mut();
    let ran = check(unsafe { tilec_store_op(store, name.as_ptr(), &mut op) }, "tilec_store_op")
        .and_then(|_| check(unsafe { tilec_op_prepare(op, &args, &mut call) }, "tilec_op_prepare"))
        .and_then(|_| {
            let note = unsafe { CStr::from_ptr(tilec_call_note(call)) }.to_string_lossy().into_owned();
            println!("rmsnorm [{rows}, {cols}]: {note}");
            check(unsafe { tilec_call_run(call, ptr::null_mut(), 0, ptr::null_mut()) }, "tilec_call_run")
        });
    unsafe {
        tilec_call_destroy(call);
        tilec_store_close(store);
    }
    ran?;
    let (mut bad, mut worst) = (0, 0f64);
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let sum: f64 = row.iter().map(|&v| f16_value(v) * f16_value(v)).sum();
        let inv = 1.0 / (sum / cols as f64 + eps as f64).sqrt();
        for c in 0..cols {
            let (want, got) = (f16_value(row[c]) * inv * f16_value(w[c]), f16_value(out[r * cols + c]));
            let err = (got - want).abs();
            worst = worst.max(err);
            if err > 1e-3 + 4e-3 * want.abs() {
                if bad < 5 {
                    eprintln!("out[{r}, {c}] = {got}, expected {want}");
                }
                bad += 1;
            }
        }
    }
    println!("rmsnorm through the C ABI from Rust: {} (max |out - reference| = {worst:.3e})",
             if bad == 0 { "ok" } else { "MISMATCH" });
    Ok(bad == 0)
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    if argv.len() == 5 && argv[1] == "--rmsnorm" {
        let size = |s: &str| s.parse::<usize>().map_err(|_| format!("'{s}' is not a size"));
        return match size(&argv[3]).and_then(|rows| Ok((rows, size(&argv[4])?))).and_then(|(r, c)| rmsnorm(&argv[2], r, c)) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        };
    }
    if argv.len() < 2 {
        eprintln!("usage: {} DEPLOY_DIR [emulate|cuda|auto]\n       {} --rmsnorm DEPLOY_DIR ROWS COLS", argv[0], argv[0]);
        return ExitCode::from(2);
    }
    if unsafe { tilec_abi_version() } != TILEC_ABI_VERSION {
        eprintln!("libtilec speaks C ABI version {}, this program {TILEC_ABI_VERSION}", unsafe { tilec_abi_version() });
        return ExitCode::FAILURE;
    }
    let dir = CString::new(argv[1].clone()).unwrap();
    let backend = CString::new(argv.get(2).cloned().unwrap_or_else(|| "emulate".into())).unwrap();
    let mut store: *mut TilecStore = ptr::null_mut();
    let mut op: *const TilecOp = ptr::null();
    let name = CString::new("paged_attention").unwrap();
    let opened = check(unsafe { tilec_store_open(dir.as_ptr(), backend.as_ptr(), &mut store) }, "tilec_store_open")
        .and_then(|_| check(unsafe { tilec_store_op(store, name.as_ptr(), &mut op) }, "tilec_store_op"));
    if let Err(e) = opened {
        eprintln!("{e}");
        return ExitCode::FAILURE;
    }
    let mut ok = true;
    for alibi in [false, true] {
        let mut p = PagedAttn::new(alibi, 0x9e3779b97f4a7c15 ^ alibi as u64);
        println!("PagedAttn B={} Hq={} Hkv={} Sq={} D={} block_size={} alibi={alibi}:", p.b, p.hq, p.hkv, p.sq, p.d,
                 p.block_size);
        match run(op, &mut p) {
            Ok((out, splits)) => {
                let want = p.reference();
                let err = out.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                println!("  num_splits={splits}, max |out - reference| = {err:.3e}");
                if !(err < 1e-4) || splits < 2 {
                    eprintln!("  FAILED: expected split-KV (num_splits >= 2) and an error below 1e-4");
                    ok = false;
                }
            }
            Err(e) => {
                eprintln!("  {e}");
                ok = false;
            }
        }
    }
    unsafe { tilec_store_close(store) };
    if ok {
        println!("ok: the seed's PagedAttn through tilec's C ABI matches the reference");
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
