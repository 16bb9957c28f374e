//! Options handed to a loop by name (a dict from `node/sim/native.py`): each read once, by the
//! name the Python config gives it; a missing, mistyped or unknown name is an error naming it.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

pub(crate) struct Options<'py> {
    dict: Bound<'py, PyDict>,
    read: Vec<&'static str>,
}

impl<'py> Options<'py> {
    pub(crate) fn new(dict: Bound<'py, PyDict>) -> Options<'py> {
        Options { dict, read: Vec::new() }
    }

    fn item(&mut self, name: &'static str) -> PyResult<Bound<'py, PyAny>> {
        self.read.push(name);
        self.dict.get_item(name)?.ok_or_else(|| PyValueError::new_err(format!("option {name} is missing")))
    }

    fn typed<T>(name: &str, value: PyResult<T>) -> PyResult<T> {
        value.map_err(|e| PyValueError::new_err(format!("option {name}: {e}")))
    }

    pub(crate) fn f64(&mut self, name: &'static str) -> PyResult<f64> {
        Self::typed(name, self.item(name)?.extract::<f64>())
    }

    pub(crate) fn usize(&mut self, name: &'static str) -> PyResult<usize> {
        Self::typed(name, self.item(name)?.extract::<usize>())
    }

    pub(crate) fn u64(&mut self, name: &'static str) -> PyResult<u64> {
        Self::typed(name, self.item(name)?.extract::<u64>())
    }

    pub(crate) fn bool(&mut self, name: &'static str) -> PyResult<bool> {
        Self::typed(name, self.item(name)?.extract::<bool>())
    }

    /// One value per layer (CYCLON, VICINITY, RINGS).
    pub(crate) fn f64s(&mut self, name: &'static str) -> PyResult<[f64; 3]> {
        Self::typed(name, self.item(name)?.extract::<[f64; 3]>())
    }

    pub(crate) fn u64s(&mut self, name: &'static str) -> PyResult<[u64; 3]> {
        Self::typed(name, self.item(name)?.extract::<[u64; 3]>())
    }

    pub(crate) fn strings(&mut self, name: &'static str) -> PyResult<Vec<String>> {
        Self::typed(name, self.item(name)?.extract::<Vec<String>>())
    }

    /// A string among `choices`: its position in them.
    pub(crate) fn choice(&mut self, name: &'static str, choices: &[&str]) -> PyResult<usize> {
        let value = Self::typed(name, self.item(name)?.extract::<String>())?;
        choices.iter().position(|c| *c == value)
            .ok_or_else(|| PyValueError::new_err(format!("option {name}: {value:?} is not one of {choices:?}")))
    }

    /// Every option read: an unknown one is an error.
    pub(crate) fn done(self) -> PyResult<()> {
        for key in self.dict.keys() {
            let key: String = key.extract()?;
            if !self.read.contains(&key.as_str()) {
                return Err(PyValueError::new_err(format!("unknown option {key}")));
            }
        }
        Ok(())
    }
}
