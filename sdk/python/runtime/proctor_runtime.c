// The Python runtime's side of proctor's plugin ABI v1 (sdk/abi/abi.go).
//
// Linked with libpython3.13 as a WASI reactor, this file exports the ABI
// marker and proctor_handle, and imports the proctor_v1 host functions.
// The interpreter starts on the first hook call, with its module search
// path fixed to the files the plugin carries (see sdk/python/build.go):
// the standard library zip, the SDK and the author's files. Everything
// above the byte level (JSON, dispatch to the author's hooks, error
// classes, tracebacks) is Python: proctor._runtime.handle.
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define IMPORT(name) __attribute__((import_module("proctor_v1"), import_name(name)))
#define EXPORT(name) __attribute__((export_name(name)))

IMPORT("read_input") void host_read_input(uint8_t *method, uint8_t *input);
IMPORT("set_output") void host_set_output(const uint8_t *ptr, uint32_t len);
IMPORT("call") uint64_t host_call(const uint8_t *op, uint32_t op_len, const uint8_t *req, uint32_t req_len,
                                  uint8_t *resp, uint32_t resp_cap);
IMPORT("take_response") void host_take_response(uint8_t *ptr);
IMPORT("log") void host_log(int32_t level, const uint8_t *ptr, uint32_t len);

// The status codes of sdk/abi.
enum { status_ok = 0, status_error = 1 };

// The marker the host checks before it instantiates a plugin.
EXPORT("proctor_abi_v1") void proctor_abi_v1(void) {}

// A response up to this size is copied in by call itself; a larger one is
// taken with take_response into a bytes object of its exact size.
#define RESP_BUF (64 << 10)
static uint8_t resp_buf[RESP_BUF];

// _proctor.call(op: str, request: bytes) -> (status: int, response: bytes)
static PyObject *py_call(PyObject *self, PyObject *args) {
    const char *op;
    Py_ssize_t op_len;
    Py_buffer req;
    if (!PyArg_ParseTuple(args, "s#y*", &op, &op_len, &req)) {
        return NULL;
    }
    uint64_t r = host_call((const uint8_t *)op, (uint32_t)op_len, req.buf, (uint32_t)req.len, resp_buf, RESP_BUF);
    PyBuffer_Release(&req);
    uint32_t status = (uint32_t)(r >> 32), n = (uint32_t)r;
    PyObject *resp;
    if (n <= RESP_BUF) {
        resp = PyBytes_FromStringAndSize((const char *)resp_buf, n);
    } else {
        resp = PyBytes_FromStringAndSize(NULL, n);
        if (resp != NULL) {
            host_take_response((uint8_t *)PyBytes_AS_STRING(resp));
        }
    }
    if (resp == NULL) {
        return NULL;
    }
    return Py_BuildValue("(IN)", status, resp);
}

// _proctor.log(level: int, message: str)
static PyObject *py_log(PyObject *self, PyObject *args) {
    int level;
    const char *msg;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "is#", &level, &msg, &n)) {
        return NULL;
    }
    host_log(level, (const uint8_t *)msg, (uint32_t)n);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"call", py_call, METH_VARARGS, "call(op, request) -> (status, response): one host operation"},
    {"log", py_log, METH_VARARGS, "log(level, message): a line in the host's log"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_proctor", "proctor's host functions (ABI v1)", -1, methods};

static PyObject *init_module(void) { return PyModule_Create(&module); }

// The files a plugin carries, as the host mounts them (read-only).
static const wchar_t *search_path[] = {L"/lib/python313.zip", L"/lib/sdk", L"/app"};

static PyObject *handler;  // proctor._runtime.handle
static char *init_error;   // why the interpreter or the SDK did not start

static void set_init_error(const char *what, const char *detail) {
    size_t n = strlen(what) + strlen(detail) + 3;
    init_error = malloc(n);
    if (init_error != NULL) {
        snprintf(init_error, n, "%s: %s", what, detail);
    }
}

// set_init_exception records the pending Python exception as the init error.
static void set_init_exception(const char *what) {
    PyObject *exc = PyErr_GetRaisedException();
    PyObject *text = exc ? PyObject_Repr(exc) : NULL;
    const char *detail = text ? PyUnicode_AsUTF8(text) : NULL;
    set_init_error(what, detail ? detail : "unknown error");
    Py_XDECREF(text);
    Py_XDECREF(exc);
    PyErr_Clear();
}

static void start(void) {
    static int started;
    if (started) {
        return;
    }
    started = 1;
    if (PyImport_AppendInittab("_proctor", init_module) < 0) {
        set_init_error("start python", "cannot register _proctor");
        return;
    }
    PyConfig config;
    PyConfig_InitIsolatedConfig(&config);
    config.site_import = 0;
    config.write_bytecode = 0;
    config.install_signal_handlers = 0;
    config.module_search_paths_set = 1;
    config.pathconfig_warnings = 0;
    config.buffered_stdio = 0;
    PyStatus st = PyConfig_SetString(&config, &config.program_name, L"python3");
    for (size_t i = 0; !PyStatus_Exception(st) && i < sizeof search_path / sizeof search_path[0]; i++) {
        st = PyWideStringList_Append(&config.module_search_paths, search_path[i]);
    }
    if (!PyStatus_Exception(st)) {
        st = Py_InitializeFromConfig(&config);
    }
    PyConfig_Clear(&config);
    if (PyStatus_Exception(st)) {
        set_init_error("start python", st.err_msg ? st.err_msg : "unknown error");
        return;
    }
    PyObject *mod = PyImport_ImportModule("proctor._runtime");
    if (mod != NULL) {
        handler = PyObject_GetAttrString(mod, "handle");
        Py_DECREF(mod);
    }
    if (handler == NULL) {
        set_init_exception("start python: import proctor._runtime (the SDK)");
    }
}

// fail hands back an error object built here, for failures the Python
// side could not report itself. msg is JSON-escaped only for quotes and
// backslashes, which is all that init and memory errors contain.
static uint32_t fail(const char *msg) {
    static const char head[] = "{\"class\":\"plugin\",\"error\":\"";
    size_t n = strlen(msg);
    char *out = malloc(sizeof head + 2 * n + 2);
    if (out == NULL) {
        static const char oom[] = "{\"class\":\"plugin\",\"error\":\"out of memory\"}";
        host_set_output((const uint8_t *)oom, sizeof oom - 1);
        return status_error;
    }
    size_t k = 0;
    memcpy(out, head, sizeof head - 1);
    k = sizeof head - 1;
    for (size_t i = 0; i < n; i++) {
        char c = msg[i];
        if (c == '"' || c == '\\') {
            out[k++] = '\\';
        } else if ((unsigned char)c < 0x20) {
            c = ' ';
        }
        out[k++] = c;
    }
    out[k++] = '"';
    out[k++] = '}';
    host_set_output((const uint8_t *)out, (uint32_t)k);
    free(out);
    return status_error;
}

// proctor_handle runs one hook: proctor._runtime.handle(method, input)
// returns (status, output bytes), which go back to the host.
EXPORT("proctor_handle") uint32_t proctor_handle(uint32_t method_len, uint32_t input_len) {
    uint8_t *method = malloc(method_len + 1);
    uint8_t *input = malloc(input_len + 1);
    if (method == NULL || input == NULL) {
        free(method);
        free(input);
        return fail("out of memory reading the hook's input");
    }
    host_read_input(method, input);
    start();
    if (handler == NULL) {
        free(method);
        free(input);
        return fail(init_error ? init_error : "start python: failed");
    }
    PyObject *res = PyObject_CallFunction(handler, "s#y#", (const char *)method, (Py_ssize_t)method_len,
                                          (const char *)input, (Py_ssize_t)input_len);
    free(method);
    free(input);
    unsigned int status;
    PyObject *out;
    if (res == NULL || !PyArg_ParseTuple(res, "IS", &status, &out)) {
        // handle reports every error itself; this is a failure to report
        // one (memory, most likely).
        Py_XDECREF(res);
        PyErr_Clear();
        return fail("the Python runtime failed to report the hook's result (out of memory?)");
    }
    host_set_output((const uint8_t *)PyBytes_AS_STRING(out), (uint32_t)PyBytes_GET_SIZE(out));
    Py_DECREF(res);
    return status;
}
