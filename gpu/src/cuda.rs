//! The suite on the GPU: the CUDA driver, cuBLAS and cuBLASLt through `cudarc`, loaded when the
//! suite runs. The only module of the workspace with `unsafe` (ADR 0011): loading the libraries,
//! reading a device's UUID, page-locked host memory and the BLAS calls, whose arguments (sizes,
//! leading dimensions) are derived here from the buffers they describe. Each `unsafe` block says
//! why it holds.

#![allow(unsafe_code)]

use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, result as blas_result, sys as blas_sys};
use cudarc::cublaslt::{
    CudaBlasLT, Matmul, MatmulConfig, MatmulShared, result as lt, sys as lt_sys,
};
use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use cudarc::driver::{result as driver, sys as driver_sys};
use half::{bf16, f16};

use crate::{
    GemmResult, MIN_MEMORY_BYTES, Measured, Observer, Phase, Plan, Precision, SuiteError, Trials,
    check_product, event_ns, first_difference, gb_s_milli, gemm_flops, normal_values, per_trial,
    tflops_milli, uuid_text,
};

/// The sentence when the CUDA driver library cannot be loaded.
pub const NO_DRIVER: &str = "the CUDA driver library (libcuda.so.1) could not be loaded: install the NVIDIA driver, and run the agent's container with the NVIDIA Container Toolkit (`--gpus`)";
/// The sentence when cuBLAS cannot be loaded.
pub const NO_CUBLAS: &str = "cuBLAS (libcublas.so.12 and libcublasLt.so.12) could not be loaded: the agent's image ships them; on a bare host install the CUDA 12 runtime libraries";

/// Whether the suite can run here: the CUDA driver library and cuBLAS load.
pub fn probe() -> Result<(), SuiteError> {
    // SAFETY: `is_culib_present` opens the shared library by its usual names to see whether it
    // loads; loading runs the library's initialisers, which for NVIDIA's libraries have no
    // preconditions on the caller.
    let driver_present = unsafe { driver_sys::is_culib_present() };
    if !driver_present {
        return Err(SuiteError::Unavailable(NO_DRIVER.to_owned()));
    }
    // SAFETY: as above.
    let blas_present =
        unsafe { blas_sys::is_culib_present() } && unsafe { lt_sys::is_culib_present() };
    if !blas_present {
        return Err(SuiteError::Unavailable(NO_CUBLAS.to_owned()));
    }
    Ok(())
}

fn cuda<T, E: std::fmt::Debug>(step: &str, result: Result<T, E>) -> Result<T, SuiteError> {
    result.map_err(|error| SuiteError::Cuda {
        step: step.to_owned(),
        error: format!("{error:?}"),
    })
}

/// The CUDA ordinal of the GPU NVML calls `gpu_uuid` (CUDA's order need not be NVML's).
fn ordinal_of(gpu_uuid: &str) -> Result<usize, SuiteError> {
    cuda("initialising CUDA", driver::init())?;
    let count = cuda("counting devices", driver::device::get_count())?;
    for ordinal in 0..count {
        let device = cuda("opening a device", driver::device::get(ordinal))?;
        let mut uuid = driver_sys::CUuuid { bytes: [0; 16] };
        // SAFETY: `uuid` is a valid, writable CUuuid and `device` a handle the driver just gave.
        let status = unsafe { driver_sys::cuDeviceGetUuid_v2(&mut uuid, device) };
        cuda("reading a device's UUID", status.result())?;
        let bytes = uuid.bytes.map(|b| b.to_ne_bytes()[0]);
        if uuid_text(bytes).eq_ignore_ascii_case(gpu_uuid) {
            return usize::try_from(ordinal)
                .map_err(|_| SuiteError::NoSuchGpu(gpu_uuid.to_owned()));
        }
    }
    Err(SuiteError::NoSuchGpu(format!(
        "{gpu_uuid} (CUDA sees a GPU in MIG mode as its instances)"
    )))
}

/// Two events that time what runs between them on a stream.
struct Timer {
    stream: Arc<CudaStream>,
    start: CudaEvent,
    end: CudaEvent,
}

impl Timer {
    fn new(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>) -> Result<Timer, SuiteError> {
        // Timing events (`None` would make events that cannot time); the host waits on `end`
        // asleep rather than spinning a core through the sustained phase.
        let start = Some(driver_sys::CUevent_flags::CU_EVENT_DEFAULT);
        let end = Some(driver_sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC);
        Ok(Timer {
            stream: stream.clone(),
            start: cuda("creating an event", ctx.new_event(start))?,
            end: cuda("creating an event", ctx.new_event(end))?,
        })
    }

    /// Nanoseconds the work `enqueue` puts on the stream takes; `during` runs after the work is
    /// enqueued, while it is in flight.
    fn time(
        &self,
        enqueue: &mut dyn FnMut() -> Result<(), SuiteError>,
        during: &mut dyn FnMut(),
    ) -> Result<u64, SuiteError> {
        cuda("recording an event", self.start.record(&self.stream))?;
        enqueue()?;
        cuda("recording an event", self.end.record(&self.stream))?;
        during();
        cuda("waiting for the GPU", self.end.synchronize())?;
        let elapsed = cuda("reading an event", self.start.elapsed_ms(&self.end))?;
        Ok(event_ns(elapsed).max(1))
    }
}

fn stop_if_cancelled(observer: &mut dyn Observer) -> Result<(), SuiteError> {
    if observer.cancelled() {
        Err(SuiteError::Cancelled)
    } else {
        Ok(())
    }
}

/// Runs the suite on the GPU NVML calls `gpu_uuid`.
pub fn run(
    gpu_uuid: &str,
    plan: &Plan,
    observer: &mut dyn Observer,
) -> Result<Measured, SuiteError> {
    plan.check().map_err(|why| SuiteError::Precondition {
        gpu: gpu_uuid.to_owned(),
        why,
    })?;
    probe()?;
    // `NVIDIA_TF32_OVERRIDE=0` turns TF32 off over what the program asks for: the TF32 figure
    // would be FP32's.
    if std::env::var("NVIDIA_TF32_OVERRIDE").is_ok_and(|v| v.trim() == "0") {
        return Err(SuiteError::Precondition {
            gpu: gpu_uuid.to_owned(),
            why: "NVIDIA_TF32_OVERRIDE=0 disables TF32, so the TF32 figure would measure FP32; unset it for the agent".to_owned(),
        });
    }
    let started = Instant::now();
    let ordinal = ordinal_of(gpu_uuid)?;
    let ctx = cuda("creating a context", CudaContext::new(ordinal))?;
    let stream = cuda("creating a stream", ctx.new_stream())?;
    let device_name = cuda("reading the device name", ctx.name())?;
    let compute_capability = cuda("reading the compute capability", ctx.compute_capability())?;
    let (free, _) = cuda("reading free memory", ctx.mem_get_info())?;
    // Two buffers for the copy, and room for cuBLAS's workspaces.
    let room = (free as u64).saturating_sub(1 << 30) / 2 / (1 << 20) * (1 << 20);
    let memory_bytes = plan.memory_bytes.min(room);
    if memory_bytes < MIN_MEMORY_BYTES {
        return Err(SuiteError::Precondition {
            gpu: gpu_uuid.to_owned(),
            why: format!(
                "{} MiB of device memory are free; the suite needs at least 3 GiB",
                free >> 20
            ),
        });
    }
    let timer = Timer::new(&ctx, &stream)?;
    let blas = cuda("creating a cuBLAS handle", CudaBlas::new(stream.clone()))?;
    let blas_lt = cuda(
        "creating a cuBLASLt handle",
        CudaBlasLT::new(stream.clone()),
    )?;
    let fp8 = compute_capability >= (8, 9);
    let inputs = Inputs::new(plan.gemm_size);
    let gpu = Gpu {
        stream: &stream,
        timer: &timer,
        blas: &blas,
        blas_lt: &blas_lt,
    };
    let mut gemm = Vec::new();
    for precision in Precision::ALL {
        if precision == Precision::Fp8 && !fp8 {
            continue;
        }
        stop_if_cancelled(observer)?;
        observer.sample(Phase::Gemm(precision));
        let result = gemm_phase(&gpu, precision, &inputs, plan, observer)?;
        gemm.push(result);
    }
    let (mem_read, mem_write, mem_copy) =
        memory_phase(&stream, &timer, &blas, memory_bytes, plan, observer)?;
    let (host_to_device, device_to_host) = host_phase(&ctx, &stream, &timer, plan, observer)?;
    let (sustained_windows_milli, sustained_elapsed) =
        sustained_phase(&gpu, &inputs, plan, observer)?;
    cuda("finishing", ctx.check_err())?;
    Ok(Measured {
        device_name,
        compute_capability,
        gemm,
        mem_read,
        mem_write,
        mem_copy,
        host_to_device,
        device_to_host,
        sustained_windows_milli,
        sustained_elapsed,
        memory_bytes,
        elapsed: started.elapsed(),
    })
}

/// One precision's operands on the device, and how to launch its GEMM and read its result.
enum Operands<'lt> {
    F32 {
        a: CudaSlice<f32>,
        b: CudaSlice<f32>,
        c: CudaSlice<f32>,
    },
    F16 {
        a: CudaSlice<f16>,
        b: CudaSlice<f16>,
        c: CudaSlice<f16>,
    },
    Bf16 {
        a: CudaSlice<bf16>,
        b: CudaSlice<bf16>,
        c: CudaSlice<bf16>,
    },
    Fp8 {
        a: CudaSlice<u8>,
        b: CudaSlice<u8>,
        c: CudaSlice<bf16>,
        gemm: Box<Fp8Gemm<'lt>>,
    },
}

/// FP8 E4M3 bytes of moderate magnitude (exponent field 5 to 8: 0.25 to 3.75, either sign),
/// never NaN.
fn fp8_values(seed: u64, count: usize) -> Vec<u8> {
    let mut state = seed | 1;
    (0..count)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let bits = state.to_le_bytes();
            let sign = bits[0] & 0x80;
            let exponent = 5 + (bits[1] & 0x03);
            let mantissa = bits[2] & 0x07;
            sign | (exponent << 3) | mantissa
        })
        .collect()
}

fn gemm_config<T: Copy>(n: i32, one: T, zero: T) -> GemmConfig<T> {
    GemmConfig {
        transa: blas_sys::cublasOperation_t::CUBLAS_OP_N,
        transb: blas_sys::cublasOperation_t::CUBLAS_OP_N,
        m: n,
        n,
        k: n,
        alpha: one,
        lda: n,
        ldb: n,
        beta: zero,
        ldc: n,
    }
}

/// `values` in a narrower format, and widened back to f32 as the GPU will hold them (for the
/// host's check of the product).
fn narrowed<T: Copy>(
    values: &[f32],
    narrow: impl Fn(f32) -> T,
    widen: impl Fn(T) -> f32,
) -> (Vec<T>, Vec<f32>) {
    let narrow: Vec<T> = values.iter().map(|v| narrow(*v)).collect();
    let widened = narrow.iter().map(|v| widen(*v)).collect();
    (narrow, widened)
}

/// The GEMMs' random-normal inputs, made once on the host (the same on every host).
struct Inputs {
    n: usize,
    a: Vec<f32>,
    b: Vec<f32>,
}

impl Inputs {
    fn new(n: usize) -> Inputs {
        Inputs {
            n,
            a: normal_values(0x5eed_a000 + n as u64, n * n),
            b: normal_values(0x5eed_b000 + n as u64, n * n),
        }
    }
}

impl<'lt> Operands<'lt> {
    /// The inputs in `precision` on the device, and the host's widened copies of FP16 and BF16
    /// inputs for the check (FP32 and TF32 are checked against `inputs` themselves; FP8 has no
    /// host check).
    #[allow(clippy::type_complexity)]
    fn new(
        stream: &Arc<CudaStream>,
        blas_lt: &'lt CudaBlasLT,
        precision: Precision,
        inputs: &Inputs,
    ) -> Result<(Operands<'lt>, Option<(Vec<f32>, Vec<f32>)>), SuiteError> {
        let n = inputs.n;
        let (a, b) = (&inputs.a, &inputs.b);
        let upload = "copying the inputs to the GPU";
        let zeros = "allocating the result";
        Ok(match precision {
            Precision::Fp32 | Precision::Tf32 => {
                let operands = Operands::F32 {
                    a: cuda(upload, stream.clone_htod(a))?,
                    b: cuda(upload, stream.clone_htod(b))?,
                    c: cuda(zeros, stream.alloc_zeros(n * n))?,
                };
                (operands, None)
            }
            Precision::Fp16 => {
                let (a, a_widened) = narrowed(a, f16::from_f32, f16::to_f32);
                let (b, b_widened) = narrowed(b, f16::from_f32, f16::to_f32);
                let operands = Operands::F16 {
                    a: cuda(upload, stream.clone_htod(&a))?,
                    b: cuda(upload, stream.clone_htod(&b))?,
                    c: cuda(zeros, stream.alloc_zeros(n * n))?,
                };
                (operands, Some((a_widened, b_widened)))
            }
            Precision::Bf16 => {
                let (a, a_widened) = narrowed(a, bf16::from_f32, bf16::to_f32);
                let (b, b_widened) = narrowed(b, bf16::from_f32, bf16::to_f32);
                let operands = Operands::Bf16 {
                    a: cuda(upload, stream.clone_htod(&a))?,
                    b: cuda(upload, stream.clone_htod(&b))?,
                    c: cuda(zeros, stream.alloc_zeros(n * n))?,
                };
                (operands, Some((a_widened, b_widened)))
            }
            Precision::Fp8 => {
                let a = fp8_values(0x5eed_a008 + n as u64, n * n);
                let b = fp8_values(0x5eed_b008 + n as u64, n * n);
                let gemm = Box::new(Fp8Gemm::new(stream, blas_lt, n)?);
                let operands = Operands::Fp8 {
                    a: cuda(upload, stream.clone_htod(&a))?,
                    b: cuda(upload, stream.clone_htod(&b))?,
                    c: cuda(zeros, stream.alloc_zeros(n * n))?,
                    gemm,
                };
                (operands, None)
            }
        })
    }

    /// Enqueues one GEMM of `precision` into the result.
    fn launch(
        &mut self,
        stream: &Arc<CudaStream>,
        blas: &CudaBlas,
        blas_lt: &CudaBlasLT,
        precision: Precision,
        n: usize,
    ) -> Result<(), SuiteError> {
        let size = i32::try_from(n).map_err(|_| SuiteError::Cuda {
            step: "sizing the GEMM".to_owned(),
            error: format!("{n} does not fit cuBLAS's int"),
        })?;
        let step = "launching a GEMM";
        match (self, precision) {
            (Operands::F32 { a, b, c }, Precision::Fp32) => {
                // SAFETY: a, b and c are n x n column-major f32 buffers on this stream's
                // device, and the configuration says exactly that (m = n = k = lda = ldb = ldc
                // = n, no transposition).
                let launched = unsafe { blas.gemm(gemm_config(size, 1.0_f32, 0.0), a, b, c) };
                cuda(step, launched)
            }
            (Operands::F32 { a, b, c }, Precision::Tf32) => {
                let config = MatmulConfig {
                    transa: false,
                    transb: false,
                    transc: false,
                    m: n as u64,
                    n: n as u64,
                    k: n as u64,
                    alpha: 1.0,
                    lda: i64::from(size),
                    ldb: i64::from(size),
                    beta: 0.0,
                    ldc: i64::from(size),
                    stride_a: None,
                    stride_b: None,
                    stride_c: None,
                    stride_bias: None,
                    batch_size: None,
                };
                // SAFETY: as for FP32: the layouts cuBLASLt builds from `config` describe a, b
                // and c exactly; no bias, no batch. `Matmul<f32>` computes with
                // CUBLAS_COMPUTE_32F_FAST_TF32: the tensor cores, explicitly.
                let launched =
                    unsafe { blas_lt.matmul(config, a, b, c, None::<&CudaSlice<f32>>, None) };
                cuda(step, launched)
            }
            (Operands::F16 { a, b, c }, _) => {
                // SAFETY: as for FP32, with f16 buffers (FP32 accumulation).
                let launched =
                    unsafe { blas.gemm(gemm_config(size, f16::ONE, f16::ZERO), a, b, c) };
                cuda(step, launched)
            }
            (Operands::Bf16 { a, b, c }, _) => {
                // SAFETY: as for FP32, with bf16 buffers (FP32 accumulation).
                let launched =
                    unsafe { blas.gemm(gemm_config(size, bf16::ONE, bf16::ZERO), a, b, c) };
                cuda(step, launched)
            }
            (Operands::Fp8 { a, b, c, gemm }, _) => gemm.launch(stream, a, b, c),
            (_, precision) => Err(SuiteError::Cuda {
                step: step.to_owned(),
                error: format!("no {} operands", precision.name()),
            }),
        }
    }

    /// The result, widened to f32 (for the bit-for-bit comparison, widening is exact).
    fn result(&self, stream: &Arc<CudaStream>) -> Result<Vec<f32>, SuiteError> {
        let step = "copying the result to the host";
        Ok(match self {
            Operands::F32 { c, .. } => cuda(step, stream.clone_dtoh(c))?,
            Operands::F16 { c, .. } => cuda(step, stream.clone_dtoh(c))?
                .into_iter()
                .map(f16::to_f32)
                .collect(),
            Operands::Bf16 { c, .. } | Operands::Fp8 { c, .. } => cuda(step, stream.clone_dtoh(c))?
                .into_iter()
                .map(bf16::to_f32)
                .collect(),
        })
    }
}

/// What the GEMM phases run on.
#[derive(Clone, Copy)]
struct Gpu<'a> {
    stream: &'a Arc<CudaStream>,
    timer: &'a Timer,
    blas: &'a CudaBlas,
    blas_lt: &'a CudaBlasLT,
}

fn gemm_phase(
    gpu: &Gpu<'_>,
    precision: Precision,
    inputs: &Inputs,
    plan: &Plan,
    observer: &mut dyn Observer,
) -> Result<GemmResult, SuiteError> {
    let Gpu {
        stream,
        timer,
        blas,
        blas_lt,
    } = *gpu;
    let n = inputs.n;
    let (mut operands, widened) = Operands::new(stream, blas_lt, precision, inputs)?;
    let host: Option<(&[f32], &[f32])> = match (precision, &widened) {
        (Precision::Fp32 | Precision::Tf32, _) => Some((&inputs.a, &inputs.b)),
        (_, Some((a, b))) => Some((a, b)),
        _ => None,
    };
    // Warm-up: the first result is kept for the comparison; the two after it time one GEMM.
    operands.launch(stream, blas, blas_lt, precision, n)?;
    let first = operands.result(stream)?;
    let mut one_ns = u64::MAX;
    for _ in 0..2 {
        let ns = timer.time(
            &mut || operands.launch(stream, blas, blas_lt, precision, n),
            &mut || {},
        )?;
        one_ns = one_ns.min(ns);
    }
    let per_trial = per_trial(one_ns, plan.min_trial);
    let flops = gemm_flops(n) * u128::from(per_trial);
    let mut values = Vec::new();
    for _ in 0..plan.trials {
        stop_if_cancelled(observer)?;
        let ns = timer.time(
            &mut || {
                for _ in 0..per_trial {
                    operands.launch(stream, blas, blas_lt, precision, n)?;
                }
                Ok(())
            },
            &mut || observer.sample(Phase::Gemm(precision)),
        )?;
        values.push(tflops_milli(flops, ns));
    }
    let last = operands.result(stream)?;
    let wrong = match first_difference(&first, &last) {
        Some(position) => Some(format!(
            "two identical {} GEMMs gave different results (first at element {position})",
            precision.name()
        )),
        None => host.and_then(|(a, b)| check_product(precision, n, a, b, &last, 64).err()),
    };
    Ok(GemmResult {
        precision,
        trials: Trials {
            values_milli: values,
        },
        per_trial,
        wrong,
    })
}

/// FP8 E4M3 GEMM through cuBLASLt: `D = A^T B` ("TN", the layout FP8 requires), BF16 output,
/// FP32 compute; scales left at their default (1).
struct Fp8Gemm<'lt> {
    /// The handle's owner outlives this value (the borrow says so).
    lt: &'lt CudaBlasLT,
    desc: lt_sys::cublasLtMatmulDesc_t,
    a_layout: lt_sys::cublasLtMatrixLayout_t,
    b_layout: lt_sys::cublasLtMatrixLayout_t,
    c_layout: lt_sys::cublasLtMatrixLayout_t,
    preference: lt_sys::cublasLtMatmulPreference_t,
    algo: lt_sys::cublasLtMatmulAlgo_t,
    workspace: CudaSlice<u8>,
}

/// cuBLASLt's recommended workspace on Hopper.
const LT_WORKSPACE: usize = 32 << 20;

impl<'lt> Fp8Gemm<'lt> {
    fn new(
        stream: &Arc<CudaStream>,
        blas_lt: &'lt CudaBlasLT,
        n: usize,
    ) -> Result<Fp8Gemm<'lt>, SuiteError> {
        let step = "preparing the FP8 GEMM";
        let rows = n as u64;
        let ld = n as i64;
        let workspace = cuda(step, stream.alloc_zeros::<u8>(LT_WORKSPACE))?;
        let a_layout = cuda(
            step,
            lt::create_matrix_layout(lt_sys::cudaDataType_t::CUDA_R_8F_E4M3, rows, rows, ld),
        )?;
        let mut gemm = Fp8Gemm {
            lt: blas_lt,
            desc: std::ptr::null_mut(),
            a_layout,
            b_layout: std::ptr::null_mut(),
            c_layout: std::ptr::null_mut(),
            preference: std::ptr::null_mut(),
            // SAFETY: the algorithm descriptor is plain data (an array of u64); all zeros is a
            // valid value, replaced below by the heuristic's choice before any use.
            algo: unsafe { std::mem::zeroed() },
            workspace,
        };
        gemm.b_layout = cuda(
            step,
            lt::create_matrix_layout(lt_sys::cudaDataType_t::CUDA_R_8F_E4M3, rows, rows, ld),
        )?;
        gemm.c_layout = cuda(
            step,
            lt::create_matrix_layout(lt_sys::cudaDataType_t::CUDA_R_16BF, rows, rows, ld),
        )?;
        gemm.desc = cuda(
            step,
            lt::create_matmul_desc(
                lt_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                lt_sys::cudaDataType_t::CUDA_R_32F,
            ),
        )?;
        let transpose: i32 = blas_sys::cublasOperation_t::CUBLAS_OP_T as i32;
        let keep: i32 = blas_sys::cublasOperation_t::CUBLAS_OP_N as i32;
        for (attribute, value) in [
            (
                lt_sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                &transpose,
            ),
            (
                lt_sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB,
                &keep,
            ),
        ] {
            // SAFETY: `desc` was created above; the attribute is a cublasOperation_t (an int32),
            // passed by pointer with its size.
            let set = unsafe {
                lt::set_matmul_desc_attribute(
                    gemm.desc,
                    attribute,
                    (value as *const i32).cast::<c_void>(),
                    std::mem::size_of::<i32>(),
                )
            };
            cuda(step, set)?;
        }
        gemm.preference = cuda(step, lt::create_matmul_pref())?;
        let workspace_bytes: u64 = LT_WORKSPACE as u64;
        // SAFETY: `preference` was created above; the attribute is a uint64 passed with its size.
        let set = unsafe {
            lt::set_matmul_pref_attribute(
                gemm.preference,
                lt_sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&workspace_bytes as *const u64).cast::<c_void>(),
                std::mem::size_of::<u64>(),
            )
        };
        cuda(step, set)?;
        // SAFETY: every handle was created above and is alive; D has C's layout.
        let heuristic = unsafe {
            lt::get_matmul_algo_heuristic(
                *gemm.lt.handle(),
                gemm.desc,
                gemm.a_layout,
                gemm.b_layout,
                gemm.c_layout,
                gemm.c_layout,
                gemm.preference,
            )
        };
        gemm.algo = cuda(step, heuristic)?.algo;
        Ok(gemm)
    }

    fn launch(
        &mut self,
        stream: &Arc<CudaStream>,
        a: &CudaSlice<u8>,
        b: &CudaSlice<u8>,
        c: &mut CudaSlice<bf16>,
    ) -> Result<(), SuiteError> {
        let alpha: f32 = 1.0;
        let beta: f32 = 0.0;
        let (a_ptr, _a_guard) = a.device_ptr(stream);
        let (b_ptr, _b_guard) = b.device_ptr(stream);
        let (c_ptr, _c_guard) = c.device_ptr_mut(stream);
        let (w_ptr, _w_guard) = self.workspace.device_ptr_mut(stream);
        // SAFETY: the layouts describe a and b (n x n E4M3 bytes) and c (n x n bf16) exactly,
        // the algorithm came from the heuristic for these descriptors, the workspace is as large
        // as the preference said, and every pointer is on this stream's device and outlives the
        // call (the guards order the stream after it).
        let launched = unsafe {
            lt::matmul(
                *self.lt.handle(),
                self.desc,
                (&alpha as *const f32).cast::<c_void>(),
                (&beta as *const f32).cast::<c_void>(),
                a_ptr as *const c_void,
                self.a_layout,
                b_ptr as *const c_void,
                self.b_layout,
                c_ptr as *const c_void,
                self.c_layout,
                c_ptr as *mut c_void,
                self.c_layout,
                &self.algo,
                w_ptr as *mut c_void,
                LT_WORKSPACE,
                stream.cu_stream() as lt_sys::cudaStream_t,
            )
        };
        cuda("launching the FP8 GEMM", launched)
    }
}

impl Drop for Fp8Gemm<'_> {
    fn drop(&mut self) {
        // SAFETY: each handle was created by this value (or is null, never created) and is
        // destroyed once, here; nothing uses them after. Errors on destruction change nothing.
        unsafe {
            if !self.preference.is_null() {
                let _ = lt::destroy_matmul_pref(self.preference);
            }
            if !self.desc.is_null() {
                let _ = lt::destroy_matmul_desc(self.desc);
            }
            for layout in [self.a_layout, self.b_layout, self.c_layout] {
                if !layout.is_null() {
                    let _ = lt::destroy_matrix_layout(layout);
                }
            }
        }
    }
}

type Figures3 = (Trials, Trials, Trials);

fn memory_phase(
    stream: &Arc<CudaStream>,
    timer: &Timer,
    blas: &CudaBlas,
    bytes: u64,
    plan: &Plan,
    observer: &mut dyn Observer,
) -> Result<Figures3, SuiteError> {
    let step = "allocating the memory buffers";
    let count = usize::try_from(bytes / 4).map_err(|_| SuiteError::Cuda {
        step: step.to_owned(),
        error: "too large".to_owned(),
    })?;
    let source = cuda(step, stream.alloc_zeros::<f32>(count))?;
    let mut target = cuda(step, stream.alloc_zeros::<f32>(count))?;
    // The sum goes to device memory: in host pointer mode cuBLAS would wait for it, and the
    // timed interval would include the copy back and the host's wake-up.
    let mut sum = cuda(step, stream.alloc_zeros::<f32>(1))?;
    let mode = "setting cuBLAS's pointer mode";
    cuda(
        mode,
        blas.set_pointer_mode(blas_sys::cublasPointerMode_t::CUBLAS_POINTER_MODE_DEVICE),
    )?;
    let buffers = Buffers {
        source: &source,
        target: &mut target,
        sum: &mut sum,
    };
    let measured = memory_trials(stream, timer, blas, buffers, bytes, plan, observer);
    // Host pointer mode again whatever happened: the GEMMs pass alpha and beta from the host.
    cuda(
        mode,
        blas.set_pointer_mode(blas_sys::cublasPointerMode_t::CUBLAS_POINTER_MODE_HOST),
    )?;
    measured
}

struct Buffers<'a> {
    source: &'a CudaSlice<f32>,
    target: &'a mut CudaSlice<f32>,
    sum: &'a mut CudaSlice<f32>,
}

fn memory_trials(
    stream: &Arc<CudaStream>,
    timer: &Timer,
    blas: &CudaBlas,
    buffers: Buffers<'_>,
    bytes: u64,
    plan: &Plan,
    observer: &mut dyn Observer,
) -> Result<Figures3, SuiteError> {
    let Buffers {
        source,
        target,
        sum,
    } = buffers;
    let elements = i32::try_from(source.len()).map_err(|_| SuiteError::Cuda {
        step: "reading device memory".to_owned(),
        error: "more elements than cuBLAS's int".to_owned(),
    })?;
    let mut read = Vec::new();
    let mut write = Vec::new();
    let mut copy = Vec::new();
    // One untimed round first.
    for trial in 0..=plan.trials {
        stop_if_cancelled(observer)?;
        observer.sample(Phase::Memory);
        let read_ns = timer.time(
            &mut || {
                let (x, _x_guard) = source.device_ptr(stream);
                let (result, _result_guard) = sum.device_ptr_mut(stream);
                // SAFETY: `x` points at `elements` f32 values on this stream's device and
                // `result` at one f32 there; the handle is in device pointer mode (set by the
                // caller), so cuBLAS writes the sum on the device and returns at once. The
                // guards order the stream around the call.
                let summed = unsafe {
                    blas_result::sasum(
                        *blas.handle(),
                        elements,
                        x as *const f32,
                        1,
                        result as *mut f32,
                    )
                };
                cuda("reading device memory", summed)
            },
            &mut || {},
        )?;
        let write_ns = timer.time(
            &mut || cuda("writing device memory", stream.memset_zeros(&mut *target)),
            &mut || {},
        )?;
        let copy_ns = timer.time(
            &mut || {
                cuda(
                    "copying device memory",
                    stream.memcpy_dtod(source, &mut *target),
                )
            },
            &mut || {},
        )?;
        if trial > 0 {
            read.push(gb_s_milli(u128::from(bytes), read_ns));
            write.push(gb_s_milli(u128::from(bytes), write_ns));
            copy.push(gb_s_milli(2 * u128::from(bytes), copy_ns));
        }
    }
    Ok((
        Trials { values_milli: read },
        Trials {
            values_milli: write,
        },
        Trials { values_milli: copy },
    ))
}

fn host_phase(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    timer: &Timer,
    plan: &Plan,
    observer: &mut dyn Observer,
) -> Result<(Trials, Trials), SuiteError> {
    let step = "allocating page-locked host memory";
    let bytes = usize::try_from(plan.host_copy_bytes).map_err(|_| SuiteError::Cuda {
        step: step.to_owned(),
        error: "too large".to_owned(),
    })?;
    // SAFETY: the page-locked buffer's bytes start unset; they are only ever copied to and
    // from the device by DMA, never read by this program, and any byte is a valid u8.
    let pinned = unsafe { ctx.alloc_pinned_with_flags::<u8>(bytes, 0) };
    let mut pinned = cuda(step, pinned)?;
    let mut device = cuda(step, stream.alloc_zeros::<u8>(bytes))?;
    let mut up = Vec::new();
    let mut down = Vec::new();
    for trial in 0..=plan.trials {
        stop_if_cancelled(observer)?;
        let up_ns = timer.time(
            &mut || {
                cuda(
                    "copying to the GPU",
                    stream.memcpy_htod(&pinned, &mut device),
                )
            },
            &mut || observer.sample(Phase::HostCopy),
        )?;
        let down_ns = timer.time(
            &mut || {
                cuda(
                    "copying from the GPU",
                    stream.memcpy_dtoh(&device, &mut pinned),
                )
            },
            &mut || observer.sample(Phase::HostCopy),
        )?;
        if trial > 0 {
            up.push(gb_s_milli(bytes as u128, up_ns));
            down.push(gb_s_milli(bytes as u128, down_ns));
        }
    }
    Ok((Trials { values_milli: up }, Trials { values_milli: down }))
}

fn sustained_phase(
    gpu: &Gpu<'_>,
    inputs: &Inputs,
    plan: &Plan,
    observer: &mut dyn Observer,
) -> Result<(Vec<u64>, Duration), SuiteError> {
    let Gpu {
        stream,
        timer,
        blas,
        blas_lt,
    } = *gpu;
    let n = inputs.n;
    let (mut operands, _) = Operands::new(stream, blas_lt, Precision::Fp16, inputs)?;
    operands.launch(stream, blas, blas_lt, Precision::Fp16, n)?;
    let one_ns = timer.time(
        &mut || operands.launch(stream, blas, blas_lt, Precision::Fp16, n),
        &mut || {},
    )?;
    // Batches of about a tenth of the sampling interval, so samples and cancellation are prompt.
    let batch = per_trial(one_ns, plan.sample_every / 10);
    let flops = gemm_flops(n) * u128::from(batch);
    let started = Instant::now();
    let mut last_sample: Option<Instant> = None;
    let mut windows = Vec::new();
    let mut window_flops = 0_u128;
    let mut window_ns = 0_u64;
    let mut window_started = Instant::now();
    while started.elapsed() < plan.sustained {
        stop_if_cancelled(observer)?;
        let ns = timer.time(
            &mut || {
                for _ in 0..batch {
                    operands.launch(stream, blas, blas_lt, Precision::Fp16, n)?;
                }
                Ok(())
            },
            &mut || {
                if last_sample.is_none_or(|at| at.elapsed() >= plan.sample_every) {
                    last_sample = Some(Instant::now());
                    observer.sample(Phase::Sustained);
                }
            },
        )?;
        window_flops += flops;
        window_ns = window_ns.saturating_add(ns);
        if window_started.elapsed() >= plan.window {
            windows.push(tflops_milli(window_flops, window_ns));
            window_flops = 0;
            window_ns = 0;
            window_started = Instant::now();
        }
    }
    if window_ns > 0 && windows.is_empty() {
        windows.push(tflops_milli(window_flops, window_ns));
    }
    Ok((windows, started.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp8_inputs_are_finite_and_moderate() {
        let values = fp8_values(3, 10_000);
        for byte in values {
            let exponent = (byte >> 3) & 0x0f;
            assert!((5..=8).contains(&exponent), "{byte:#x}");
            assert_ne!(byte & 0x7f, 0x7f, "NaN");
        }
    }

    /// On a machine without the NVIDIA driver (CI), the suite says so in one sentence.
    #[test]
    fn without_cuda_the_suite_says_why_in_one_sentence() {
        struct Never;
        impl Observer for Never {
            fn cancelled(&mut self) -> bool {
                false
            }
            fn sample(&mut self, _: Phase) {}
        }
        if probe().is_ok() {
            // A machine with CUDA: the device check (`scripts/gpu-check.sh`) runs the suite.
            return;
        }
        let error = run(
            "GPU-00000000-0000-0000-0000-000000000000",
            &Plan::default(),
            &mut Never,
        )
        .unwrap_err();
        let text = error.to_string();
        assert!(matches!(error, SuiteError::Unavailable(_)), "{text}");
        assert!(text == NO_DRIVER || text == NO_CUBLAS, "{text}");
        assert!(!text.contains('\n'));
    }
}
