//! Python bindings for `crate::codec` (DYNAMIXEL Protocol 2.0): bytes in, bytes out.
//!
//! Every call here is a few microseconds of pure work on small inputs, so none releases the GIL.
//! The codec's errors are born in Python (`tether._codec_errors`: `DxlUsageError`,
//! `DxlFrameError`, with `code`, `message` and `details`): the core decides the failure (a
//! `CodecError`, kind and message) and `to_py` hands it, as `(code, message, usage)`, to that
//! module's `from_codec`, which returns the exception to raise.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::codec::packet::{encode_instruction, encode_status, Instruction, Packet, BROADCAST_ID};
use crate::codec::{
    crc16, CodecError, CodecErrorKind, Command, Decoder, DecoderConfig, StatusErrorCode,
};

/// Converted once: the core's failure, as `(code, message, usage)`, becomes the Python-born
/// exception `tether._codec_errors.from_codec` returns (a usage error or a frame error).
fn to_py(err: CodecError) -> PyErr {
    Python::attach(|py| {
        let made = py
            .import("tether._codec_errors")
            .and_then(|m| m.getattr("from_codec"))
            .and_then(|f| f.call1((err.kind.code(), err.message.as_str(), err.kind.is_usage())));
        match made {
            Ok(exc) => PyErr::from_value(exc),
            Err(import_failed) => import_failed,
        }
    })
}

fn device_id(id: i64) -> PyResult<u8> {
    u8::try_from(id).map_err(|_| {
        to_py(CodecError {
            kind: CodecErrorKind::UsageBadId,
            message: format!("id {id} is not a byte"),
        })
    })
}

fn word(name: &str, value: i64) -> PyResult<u16> {
    u16::try_from(value).map_err(|_| {
        to_py(CodecError {
            kind: CodecErrorKind::UsageBadArgument,
            message: format!("{name} {value} is not 0..=65535"),
        })
    })
}

fn byte(name: &str, value: i64) -> PyResult<u8> {
    u8::try_from(value).map_err(|_| {
        to_py(CodecError {
            kind: CodecErrorKind::UsageBadArgument,
            message: format!("{name} {value} is not 0..=255"),
        })
    })
}

fn encode_cmd<'py>(py: Python<'py>, id: i64, cmd: &Command) -> PyResult<Bound<'py, PyBytes>> {
    let frame = cmd.encode(device_id(id)?).map_err(to_py)?;
    Ok(PyBytes::new(py, &frame))
}

/// CRC-16 (poly 0x8005) of `data`.
#[pyfunction]
fn dxl_crc16(data: &[u8]) -> u16 {
    crc16(data)
}

/// Frame any instruction byte with raw parameters (stuffing, length and CRC applied).
#[pyfunction]
#[pyo3(signature = (id, instruction, params = b"".as_slice()))]
fn dxl_encode<'py>(
    py: Python<'py>,
    id: i64,
    instruction: i64,
    params: &[u8],
) -> PyResult<Bound<'py, PyBytes>> {
    let frame = encode_instruction(device_id(id)?, byte("instruction", instruction)?, params)
        .map_err(to_py)?;
    Ok(PyBytes::new(py, &frame))
}

/// Frame a status packet (what a device answers).
#[pyfunction]
#[pyo3(signature = (id, error, params = b"".as_slice()))]
fn dxl_encode_status<'py>(
    py: Python<'py>,
    id: i64,
    error: i64,
    params: &[u8],
) -> PyResult<Bound<'py, PyBytes>> {
    let frame = encode_status(device_id(id)?, byte("error", error)?, params).map_err(to_py)?;
    Ok(PyBytes::new(py, &frame))
}

#[pyfunction]
fn dxl_ping(py: Python<'_>, id: i64) -> PyResult<Bound<'_, PyBytes>> {
    encode_cmd(py, id, &Command::Ping)
}

#[pyfunction]
fn dxl_read(py: Python<'_>, id: i64, address: i64, length: i64) -> PyResult<Bound<'_, PyBytes>> {
    encode_cmd(
        py,
        id,
        &Command::Read {
            address: word("address", address)?,
            length: word("length", length)?,
        },
    )
}

#[pyfunction]
fn dxl_write<'py>(
    py: Python<'py>,
    id: i64,
    address: i64,
    data: &[u8],
) -> PyResult<Bound<'py, PyBytes>> {
    encode_cmd(
        py,
        id,
        &Command::Write {
            address: word("address", address)?,
            data: data.to_vec(),
        },
    )
}

#[pyfunction]
fn dxl_reg_write<'py>(
    py: Python<'py>,
    id: i64,
    address: i64,
    data: &[u8],
) -> PyResult<Bound<'py, PyBytes>> {
    encode_cmd(
        py,
        id,
        &Command::RegWrite {
            address: word("address", address)?,
            data: data.to_vec(),
        },
    )
}

#[pyfunction]
#[pyo3(signature = (id = i64::from(BROADCAST_ID)))]
fn dxl_action(py: Python<'_>, id: i64) -> PyResult<Bound<'_, PyBytes>> {
    encode_cmd(py, id, &Command::Action)
}

#[pyfunction]
fn dxl_reboot(py: Python<'_>, id: i64) -> PyResult<Bound<'_, PyBytes>> {
    encode_cmd(py, id, &Command::Reboot)
}

#[pyfunction]
fn dxl_sync_read(
    py: Python<'_>,
    address: i64,
    length: i64,
    ids: Vec<i64>,
) -> PyResult<Bound<'_, PyBytes>> {
    let ids = ids
        .into_iter()
        .map(device_id)
        .collect::<PyResult<Vec<u8>>>()?;
    let cmd = Command::SyncRead {
        address: word("address", address)?,
        length: word("length", length)?,
        ids,
    };
    encode_cmd(py, i64::from(BROADCAST_ID), &cmd)
}

#[pyfunction]
fn dxl_sync_write(
    py: Python<'_>,
    address: i64,
    length: i64,
    entries: Vec<(i64, Vec<u8>)>,
) -> PyResult<Bound<'_, PyBytes>> {
    let entries = entries
        .into_iter()
        .map(|(id, data)| Ok((device_id(id)?, data)))
        .collect::<PyResult<Vec<_>>>()?;
    let cmd = Command::SyncWrite {
        address: word("address", address)?,
        length: word("length", length)?,
        entries,
    };
    encode_cmd(py, i64::from(BROADCAST_ID), &cmd)
}

/// One decoded frame. For a status packet, `error`/`alert`/`error_code` decode its error byte
/// and `data` holds the parameters after it.
#[pyclass(module = "tether._core", frozen, name = "DxlPacket")]
pub struct PyDxlPacket {
    inner: Packet,
}

#[pymethods]
impl PyDxlPacket {
    #[getter]
    fn id(&self) -> u8 {
        self.inner.id
    }
    #[getter]
    fn instruction(&self) -> u8 {
        self.inner.instruction
    }
    #[getter]
    fn params<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.params)
    }
    #[getter]
    fn is_status(&self) -> bool {
        self.inner.is_status()
    }
    /// The raw error byte of a status packet, None for an instruction packet.
    #[getter]
    fn error(&self) -> Option<u8> {
        self.inner.status_error().ok().map(|e| e.to_byte())
    }
    #[getter]
    fn alert(&self) -> bool {
        self.inner.status_error().is_ok_and(|e| e.alert)
    }
    /// Stable code of the error number ("none", "result_fail", ...), None for instructions.
    #[getter]
    fn error_code(&self) -> Option<&'static str> {
        self.inner.status_error().ok().map(|e| e.code.code())
    }
    #[getter]
    fn data<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.inner.status_data())
    }
    /// Interpret an instruction packet as a typed command.
    fn command(&self) -> PyResult<PyDxlCommand> {
        Command::parse(&self.inner)
            .map(|inner| PyDxlCommand { inner })
            .map_err(to_py)
    }
    fn __repr__(&self) -> String {
        format!(
            "DxlPacket(id={}, instruction=0x{:02X}, params={:02X?})",
            self.inner.id, self.inner.instruction, self.inner.params
        )
    }
}

/// A parsed instruction. Fields that do not apply to `name` are None / empty.
#[pyclass(module = "tether._core", frozen, name = "DxlCommand")]
pub struct PyDxlCommand {
    inner: Command,
}

#[pymethods]
impl PyDxlCommand {
    #[getter]
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    #[getter]
    fn instruction(&self) -> u8 {
        self.inner.instruction()
    }
    #[getter]
    fn address(&self) -> Option<u16> {
        match &self.inner {
            Command::Read { address, .. }
            | Command::Write { address, .. }
            | Command::RegWrite { address, .. }
            | Command::SyncRead { address, .. }
            | Command::SyncWrite { address, .. } => Some(*address),
            _ => None,
        }
    }
    #[getter]
    fn length(&self) -> Option<u16> {
        match &self.inner {
            Command::Read { length, .. }
            | Command::SyncRead { length, .. }
            | Command::SyncWrite { length, .. } => Some(*length),
            Command::Write { data, .. } | Command::RegWrite { data, .. } => {
                u16::try_from(data.len()).ok()
            }
            _ => None,
        }
    }
    /// WRITE/REG_WRITE data, FACTORY_RESET option, or an uninterpreted instruction's params.
    #[getter]
    fn data<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        match &self.inner {
            Command::Write { data, .. } | Command::RegWrite { data, .. } => PyBytes::new(py, data),
            Command::FactoryReset { option } => PyBytes::new(py, &[*option]),
            Command::Other { params, .. } => PyBytes::new(py, params),
            _ => PyBytes::new(py, b""),
        }
    }
    #[getter]
    fn ids(&self) -> Vec<u16> {
        // u16, not u8: pyo3 turns a Vec<u8> into `bytes`, and this is a list of ids.
        match &self.inner {
            Command::SyncRead { ids, .. } => ids.iter().map(|&id| u16::from(id)).collect(),
            Command::SyncWrite { entries, .. } => {
                entries.iter().map(|(id, _)| u16::from(*id)).collect()
            }
            _ => Vec::new(),
        }
    }
    #[getter]
    fn entries<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        match &self.inner {
            Command::SyncWrite { entries, .. } => entries
                .iter()
                .map(|(id, data)| {
                    PyTuple::new(
                        py,
                        [
                            id.into_pyobject(py)?.into_any(),
                            PyBytes::new(py, data).into_any(),
                        ],
                    )
                })
                .collect(),
            _ => Ok(Vec::new()),
        }
    }
    fn __repr__(&self) -> String {
        format!("DxlCommand({:?})", self.inner)
    }
}

/// Streaming decoder: `feed` bytes, `next_packet` until it returns None ("need more data").
/// A rejected frame raises `DxlFrameError` and the decoder stays usable. Single owner.
#[pyclass(module = "tether._core", name = "DxlDecoder")]
pub struct PyDxlDecoder {
    inner: Decoder,
}

#[pymethods]
impl PyDxlDecoder {
    #[new]
    #[pyo3(signature = (*, max_length = 4096))]
    fn new(max_length: usize) -> PyResult<Self> {
        if max_length < 3 {
            return Err(to_py(CodecError {
                kind: CodecErrorKind::UsageBadArgument,
                message: "max_length below 3".into(),
            }));
        }
        Ok(Self {
            inner: Decoder::new(DecoderConfig { max_length }),
        })
    }
    fn feed(&mut self, data: &[u8]) {
        self.inner.feed(data);
    }
    fn next_packet(&mut self) -> PyResult<Option<PyDxlPacket>> {
        self.inner
            .next_packet()
            .map(|p| p.map(|inner| PyDxlPacket { inner }))
            .map_err(to_py)
    }
    /// Abandon a partial frame (after a read timeout): skip one byte and scan again.
    fn resync(&mut self) {
        self.inner.resync();
    }
    fn clear(&mut self) {
        self.inner.clear();
    }
    #[getter]
    fn buffered(&self) -> usize {
        self.inner.buffered()
    }
    #[getter]
    fn discarded(&self) -> u64 {
        self.inner.discarded()
    }
}

/// Decode exactly one complete frame.
#[pyfunction]
fn dxl_decode_frame(frame: &[u8]) -> PyResult<PyDxlPacket> {
    crate::codec::decoder::decode_frame(frame)
        .map(|inner| PyDxlPacket { inner })
        .map_err(to_py)
}

/// Stable codes of codec errors (usage and frame).
#[pyfunction]
fn dxl_error_codes() -> Vec<&'static str> {
    CodecErrorKind::ALL.iter().map(|k| k.code()).collect()
}

/// Stable codes of status error numbers 0..=7.
#[pyfunction]
fn dxl_status_error_codes() -> Vec<&'static str> {
    StatusErrorCode::DEFINED.iter().map(|c| c.code()).collect()
}

/// Instruction names and bytes.
#[pyfunction]
fn dxl_instructions() -> Vec<(&'static str, u8)> {
    Instruction::ALL
        .iter()
        .map(|i| (i.name(), *i as u8))
        .collect()
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDxlPacket>()?;
    m.add_class::<PyDxlCommand>()?;
    m.add_class::<PyDxlDecoder>()?;
    m.add_function(wrap_pyfunction!(dxl_crc16, m)?)?;
    m.add_function(wrap_pyfunction!(dxl_encode, m)?)?;
    m.add_function(wrap_pyfunction!(dxl_encode_status, m)?)?;
    m.add_function(wrap_pyfunction!(dxl_ping, m)?)?;
    m.add_function(wrap_pyfunction!(dxl_read, m)?)?;
    m.add_function(wrap_pyfunction!(dxl_write, m)?)?;
    m.add_function(wrap_pyfunction!(dxl_reg_write, m)?)?;
    m.add_function(wrap_pyfunction!(dxl_action, m)?)?;
    m.add_function(wrap_pyfunction!(dxl_reboot, m)?)?;
    m.add_function(wrap_pyfunction!(dxl_sync_read, m)?)?;
    m.add_function(wrap_pyfunction!(dxl_sync_write, m)?)?;
    m.add_function(wrap_pyfunction!(dxl_decode_frame, m)?)?;
    m.add_function(wrap_pyfunction!(dxl_error_codes, m)?)?;
    m.add_function(wrap_pyfunction!(dxl_status_error_codes, m)?)?;
    m.add_function(wrap_pyfunction!(dxl_instructions, m)?)?;
    Ok(())
}
