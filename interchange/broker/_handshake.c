/*
 * interchange.broker._handshake: TLS handshake steps on a thread of their own that never takes the GIL.
 *
 * A server handshake step is one SSL_do_handshake call on a session whose input is already in its
 * incoming memory BIO (fed on the loop's thread). CPython's SSLObject.do_handshake releases the GIL
 * for that call, but the thread that makes it takes the GIL before and after: at a low scheduling
 * priority it may be stopped while it holds it, and the event loop's thread then waits. Here a pthread
 * makes the call with no Python around it and tells the loop through an eventfd; the loop (holding the
 * GIL, as always) collects the outcomes.
 *
 * The SSL* comes from CPython's private ``_ssl._SSLSocket`` object (an ``ssl.SSLObject``'s
 * ``_sslobj``). Its place in the object is not an API: :func:`probe` gives the pointers this module
 * reads from an ``_SSLSocket``, its context and two ``MemoryBIO`` objects, and what OpenSSL says of
 * them, for a self-test (tls_stream.py) that must hold before any step is run here.
 *
 * Stepper()
 *     Starts the thread. ``fileno()``: the eventfd, readable when outcomes wait; ``native_id``: the
 *     thread's id (for its scheduling and CPUs, set by the caller).
 * Stepper.submit(token, sslobj)
 *     Queue a step on ``sslobj``'s SSL* (the caller guarantees no other thread touches that session until
 *     its outcome is collected); ``token`` and ``sslobj`` are kept referenced until then.
 * Stepper.results() -> list[(token, status, cpu_s, errors)]
 *     The outcomes that are back: status 0 the handshake is complete, 1 it wants more input, 2 anything
 *     else (``errors``: the OpenSSL error queue the step left on the thread, for :func:`restore`; else None).
 *     ``cpu_s``: the thread CPU time of the step.
 * Stepper.close()
 *     The thread ends after the step it runs (joined); steps not collected are dropped.
 * openssl_version() -> int
 *     OpenSSL_version_num() of the libssl this module runs (it must be the one _ssl is linked with).
 * restore(errors)
 *     Put ``errors`` on the calling thread's OpenSSL error queue (so that _ssl, called on this thread on
 *     the failed session, raises the very exception it would have raised on the worker).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* CPython 3.11's _ssl objects: the leading fields only (Modules/_ssl.c). tls_stream.py checks the
 * interpreter's version and the objects' sizes, and this module's probe cross-checks with OpenSSL. */
typedef struct {
    PyObject_HEAD
    PyObject *Socket;
    SSL *ssl;
    PyObject *ctx;
} SslSocketHead;

typedef struct {
    PyObject_HEAD
    SSL_CTX *ctx;
} SslContextHead;

typedef struct {
    PyObject_HEAD
    BIO *bio;
} MemoryBioHead;

#define MAX_ERRORS 8
#define ERROR_DATA 160

typedef struct {
    unsigned long code;
    const char *file; /* OpenSSL's static strings */
    int line;
    const char *func;
    int flags;
    char data[ERROR_DATA];
} SavedError;

typedef struct Step {
    struct Step *next;
    PyObject *token;
    PyObject *sslobj;
    SSL *ssl;
    int status;
    double cpu_s;
    int n_errors;
    SavedError errors[MAX_ERRORS];
} Step;

typedef struct {
    PyObject_HEAD
    pthread_t thread;
    int started;
    int efd;
    long native_id;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int stop;
    Step *in_head, *in_tail;
    Step *out_head, *out_tail;
} Stepper;

static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void save_errors(Step *step) {
    const char *file, *func, *data;
    int line, flags;
    unsigned long code;
    step->n_errors = 0;
    while ((code = ERR_get_error_all(&file, &line, &func, &data, &flags)) != 0) {
        if (step->n_errors == MAX_ERRORS) {
            memmove(step->errors, step->errors + 1, sizeof(SavedError) * (MAX_ERRORS - 1));
            step->n_errors--; /* keep the last ones: _ssl reads the last */
        }
        SavedError *saved = &step->errors[step->n_errors++];
        saved->code = code;
        saved->file = file;
        saved->line = line;
        saved->func = func;
        saved->flags = flags & ERR_TXT_STRING;
        saved->data[0] = '\0';
        if (saved->flags && data != NULL) {
            strncpy(saved->data, data, ERROR_DATA - 1);
            saved->data[ERROR_DATA - 1] = '\0';
        }
    }
}

static void run_step(Step *step) {
    ERR_clear_error();
    double cpu = thread_cpu();
    int ret = SSL_do_handshake(step->ssl);
    int err = ret == 1 ? SSL_ERROR_NONE : SSL_get_error(step->ssl, ret);
    step->cpu_s = thread_cpu() - cpu;
    step->status = err == SSL_ERROR_NONE ? 0 : err == SSL_ERROR_WANT_READ ? 1 : 2;
    step->n_errors = 0;
    if (step->status == 2)
        save_errors(step);
    ERR_clear_error();
}

static void *worker(void *arg) {
    Stepper *self = (Stepper *)arg;
    pthread_mutex_lock(&self->lock);
    self->native_id = (long)syscall(SYS_gettid);
    pthread_cond_broadcast(&self->wake);
    for (;;) {
        while (!self->stop && self->in_head == NULL)
            pthread_cond_wait(&self->wake, &self->lock);
        if (self->stop)
            break;
        Step *step = self->in_head;
        self->in_head = step->next;
        if (self->in_head == NULL)
            self->in_tail = NULL;
        pthread_mutex_unlock(&self->lock);
        run_step(step);
        pthread_mutex_lock(&self->lock);
        step->next = NULL;
        int was_empty = self->out_head == NULL;
        if (self->out_tail)
            self->out_tail->next = step;
        else
            self->out_head = step;
        self->out_tail = step;
        if (was_empty) {
            uint64_t one = 1;
            ssize_t n = write(self->efd, &one, sizeof one);
            (void)n;
        }
    }
    pthread_mutex_unlock(&self->lock);
    OPENSSL_thread_stop();
    return NULL;
}

#define SSL_SOCKET "_ssl._SSLSocket"

static int check_type(PyObject *obj, const char *type_name, Py_ssize_t size);

static SSL *ssl_of(PyObject *sslobj) {
    return ((SslSocketHead *)sslobj)->ssl;
}

static PyObject *Stepper_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (!PyArg_ParseTuple(args, ":Stepper"))
        return NULL;
    Stepper *self = (Stepper *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    /* the lock and condition first: a failure below deallocates, which destroys them */
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->wake, NULL);
    self->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->efd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(self);
        return NULL;
    }
    self->native_id = 0;
    int rc = pthread_create(&self->thread, NULL, worker, self);
    if (rc != 0) {
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(self);
        return NULL;
    }
    self->started = 1;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    while (self->native_id == 0)
        pthread_cond_wait(&self->wake, &self->lock);
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    return (PyObject *)self;
}

static void free_steps(Step *step) {
    while (step) {
        Step *next = step->next;
        Py_XDECREF(step->token);
        Py_XDECREF(step->sslobj);
        PyMem_RawFree(step);
        step = next;
    }
}

static PyObject *Stepper_close(Stepper *self, PyObject *Py_UNUSED(ignored)) {
    if (self->started) {
        pthread_mutex_lock(&self->lock);
        self->stop = 1;
        pthread_cond_broadcast(&self->wake);
        pthread_mutex_unlock(&self->lock);
        Py_BEGIN_ALLOW_THREADS
        pthread_join(self->thread, NULL);
        Py_END_ALLOW_THREADS
        self->started = 0;
        free_steps(self->in_head);
        free_steps(self->out_head);
        self->in_head = self->in_tail = self->out_head = self->out_tail = NULL;
    }
    Py_RETURN_NONE;
}

static void Stepper_dealloc(Stepper *self) {
    PyObject *done = Stepper_close(self, NULL);
    Py_XDECREF(done);
    if (self->efd >= 0)
        close(self->efd);
    pthread_mutex_destroy(&self->lock);
    pthread_cond_destroy(&self->wake);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Stepper_submit(Stepper *self, PyObject *args) {
    PyObject *token, *sslobj;
    if (!PyArg_ParseTuple(args, "OO:submit", &token, &sslobj))
        return NULL;
    if (!self->started) {
        PyErr_SetString(PyExc_RuntimeError, "the handshake stepper is closed");
        return NULL;
    }
    if (check_type(sslobj, SSL_SOCKET, sizeof(SslSocketHead)) < 0)
        return NULL;
    Step *step = PyMem_RawCalloc(1, sizeof(Step));
    if (step == NULL)
        return PyErr_NoMemory();
    Py_INCREF(token);
    Py_INCREF(sslobj);
    step->token = token;
    step->sslobj = sslobj;
    step->ssl = ssl_of(sslobj);
    pthread_mutex_lock(&self->lock);
    if (self->in_tail)
        self->in_tail->next = step;
    else
        self->in_head = step;
    self->in_tail = step;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
    Py_RETURN_NONE;
}

static PyObject *step_result(Step *step) {
    PyObject *errors = Py_None;
    Py_INCREF(errors);
    if (step->status == 2) {
        Py_DECREF(errors);
        errors = PyBytes_FromStringAndSize((const char *)step->errors, sizeof(SavedError) * step->n_errors);
        if (errors == NULL)
            return NULL;
    }
    PyObject *row = Py_BuildValue("(OidN)", step->token, step->status, step->cpu_s, errors);
    return row;
}

static PyObject *Stepper_results(Stepper *self, PyObject *Py_UNUSED(ignored)) {
    uint64_t count;
    ssize_t n = read(self->efd, &count, sizeof count);
    (void)n;
    pthread_mutex_lock(&self->lock);
    Step *steps = self->out_head;
    self->out_head = self->out_tail = NULL;
    pthread_mutex_unlock(&self->lock);
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        free_steps(steps);
        return NULL;
    }
    while (steps) {
        Step *next = steps->next;
        steps->next = NULL;
        PyObject *row = step_result(steps);
        if (row == NULL || PyList_Append(out, row) < 0) {
            Py_XDECREF(row);
            Py_DECREF(out);
            free_steps(steps);
            return NULL;
        }
        Py_DECREF(row);
        free_steps(steps);
        steps = next;
    }
    return out;
}

static PyObject *Stepper_fileno(Stepper *self, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromLong(self->efd);
}

static PyObject *Stepper_native_id(Stepper *self, void *Py_UNUSED(closure)) {
    return PyLong_FromLong(self->native_id);
}

static PyMethodDef Stepper_methods[] = {
    {"submit", (PyCFunction)Stepper_submit, METH_VARARGS, "Queue a handshake step on an _ssl._SSLSocket."},
    {"results", (PyCFunction)Stepper_results, METH_NOARGS, "The outcomes back: (token, status, cpu_s, errors)."},
    {"fileno", (PyCFunction)Stepper_fileno, METH_NOARGS, "The eventfd, readable when outcomes wait."},
    {"close", (PyCFunction)Stepper_close, METH_NOARGS, "End the thread after its step; drop the rest."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Stepper_getset[] = {
    {"native_id", (getter)Stepper_native_id, NULL, "The worker thread's id (gettid).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject StepperType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "interchange.broker._handshake.Stepper",
    .tp_basicsize = sizeof(Stepper),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "TLS handshake steps on a thread that never takes the GIL.",
    .tp_new = Stepper_new,
    .tp_dealloc = (destructor)Stepper_dealloc,
    .tp_methods = Stepper_methods,
    .tp_getset = Stepper_getset,
};

static PyObject *restore(PyObject *Py_UNUSED(module), PyObject *arg) {
    char *raw;
    Py_ssize_t size;
    if (PyBytes_AsStringAndSize(arg, &raw, &size) < 0)
        return NULL;
    if (size % (Py_ssize_t)sizeof(SavedError) != 0) {
        PyErr_SetString(PyExc_ValueError, "not a saved OpenSSL error queue");
        return NULL;
    }
    for (const SavedError *saved = (const SavedError *)raw; (const char *)saved < raw + size; saved++) {
        unsigned long code = saved->code;
        int lib = ERR_SYSTEM_ERROR(code) ? ERR_LIB_SYS : ERR_GET_LIB(code);
        int reason = ERR_SYSTEM_ERROR(code) ? (int)(code & ERR_SYSTEM_MASK) : ERR_GET_REASON(code);
        ERR_new();
        ERR_set_debug(saved->file, saved->line, saved->func);
        if (saved->flags)
            ERR_set_error(lib, reason, "%s", saved->data);
        else
            ERR_set_error(lib, reason, NULL);
    }
    Py_RETURN_NONE;
}

static int check_type(PyObject *obj, const char *type_name, Py_ssize_t size) {
    /* the type or a base (ssl.SSLContext derives from _ssl._SSLContext): their leading fields are the base's */
    for (PyTypeObject *type = Py_TYPE(obj); type != NULL; type = type->tp_base) {
        if (strcmp(type->tp_name, type_name) == 0 && type->tp_basicsize >= size)
            return 0;
    }
    PyErr_Format(PyExc_TypeError, "not a %s of at least %zd bytes: %s", type_name, size, Py_TYPE(obj)->tp_name);
    return -1;
}

/* probe(sslobj, context, incoming, outgoing) -> (ssl_ctx_matches, rbio_matches, wbio_matches, server) */
static PyObject *probe(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *sslobj, *context, *incoming, *outgoing;
    if (!PyArg_ParseTuple(args, "OOOO:probe", &sslobj, &context, &incoming, &outgoing))
        return NULL;
    if (check_type(sslobj, SSL_SOCKET, sizeof(SslSocketHead)) < 0
        || check_type(context, "_ssl._SSLContext", sizeof(SslContextHead)) < 0
        || check_type(incoming, "_ssl.MemoryBIO", sizeof(MemoryBioHead)) < 0
        || check_type(outgoing, "_ssl.MemoryBIO", sizeof(MemoryBioHead)) < 0)
        return NULL;
    SslSocketHead *head = (SslSocketHead *)sslobj;
    if (head->ctx != context) /* the _SSLSocket's own reference to its context, before any OpenSSL call */
        return Py_BuildValue("(OOOO)", Py_False, Py_False, Py_False, Py_False);
    SSL *ssl = head->ssl;
    SSL_CTX *ctx = ((SslContextHead *)context)->ctx;
    if (ssl == NULL || ctx == NULL)
        return Py_BuildValue("(OOOO)", Py_False, Py_False, Py_False, Py_False);
    return Py_BuildValue("(NNNN)", PyBool_FromLong(SSL_get_SSL_CTX(ssl) == ctx),
                         PyBool_FromLong(SSL_get_rbio(ssl) == ((MemoryBioHead *)incoming)->bio),
                         PyBool_FromLong(SSL_get_wbio(ssl) == ((MemoryBioHead *)outgoing)->bio),
                         PyBool_FromLong(SSL_is_server(ssl)));
}

static PyObject *openssl_version(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromUnsignedLong(OpenSSL_version_num());
}

static PyMethodDef module_methods[] = {
    {"openssl_version", openssl_version, METH_NOARGS, "OpenSSL_version_num() of the library linked."},
    {"restore", restore, METH_O, "Put a step's saved OpenSSL errors on this thread's error queue."},
    {"probe", probe, METH_VARARGS, "What this module reads from _ssl objects, checked with OpenSSL."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "interchange.broker._handshake",
    "TLS handshake steps on a thread that never takes the GIL.", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__handshake(void) {
    if (PyType_Ready(&StepperType) < 0)
        return NULL;
    PyObject *mod = PyModule_Create(&module);
    if (mod == NULL)
        return NULL;
    Py_INCREF(&StepperType);
    if (PyModule_AddObject(mod, "Stepper", (PyObject *)&StepperType) < 0) {
        Py_DECREF(&StepperType);
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
