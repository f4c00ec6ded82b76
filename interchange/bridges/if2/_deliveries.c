/*
 * interchange.bridges.if2._deliveries: optional C reader of whole AMQP 0-9-1 deliveries.
 *
 * read(buffer, offset, channels, properties, names, delivery_type, events) -> offset
 *
 * What amqp091.Connection._whole_delivery does in Python, for every delivery in a row from
 * ``offset``: a basic.deliver method frame, its content header (class basic) whose properties
 * section is a key of ``properties`` (bytes -> the properties object pamqp decoded from them
 * before), and one body frame of the whole body size (none for an empty body), all on one channel
 * that is open and assembling nothing (``channels[channel].deliver is None``), each frame ending in
 * 0xCE; the deliver's consumer tag, exchange and routing key as bytes a key of ``names`` (the frame's
 * arguments less the delivery tag and redelivered octet -> (consumer tag, exchange, routing key)),
 * and nothing after the routing key. Each such delivery is appended to ``events`` as
 * ``delivery_type((channel, delivery_tag, redelivered, exchange, routing_key, properties, body))``.
 *
 * It stops at the first frame that is not the start of such a delivery, or not whole in the buffer,
 * and returns its offset: the Python code reads that one (and decides what is wrong with it, and
 * learns the names and properties it did not know). So this never decides an error and never reads
 * past ``len(buffer)``: every position is checked against the end before it is read; positions are
 * Py_ssize_t, sizes at most 2^32 - 1 on a 64-bit build.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

enum { FRAME_METHOD = 1, FRAME_HEADER = 2, FRAME_BODY = 3, FRAME_END = 0xCE };

#include "../../broker/_be_bytes.h"

/* The value of ``mapping[key]`` for the ``size`` bytes at ``p`` (borrowed), NULL when absent (or an
 * error is set: the caller checks PyErr_Occurred). */
static PyObject *
lookup(PyObject *mapping, const uint8_t *p, Py_ssize_t size)
{
    PyObject *key = PyBytes_FromStringAndSize((const char *)p, size);
    if (key == NULL)
        return NULL;
    PyObject *value = PyDict_GetItemWithError(mapping, key);
    Py_DECREF(key);
    return value;
}

/* Whether channel ``channel`` is open and assembling no delivery: 1, 0, or -1 (error set). */
static int
idle_channel(PyObject *channels, unsigned channel)
{
    PyObject *number = PyLong_FromUnsignedLong(channel);
    if (number == NULL)
        return -1;
    PyObject *state = PyDict_GetItemWithError(channels, number);
    Py_DECREF(number);
    if (state == NULL)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *deliver = PyObject_GetAttrString(state, "deliver");
    if (deliver == NULL)
        return -1;
    int idle = deliver == Py_None;
    Py_DECREF(deliver);
    return idle;
}

/* The names of the deliver whose arguments (after class and method ids) are [at, stop): a borrowed
 * (consumer tag, exchange, routing key) tuple from ``names``, or NULL (not known, not 0-9-1 as
 * expected, or an error set). ``tag`` and ``bits``: the delivery tag and the redelivered octet. */
static PyObject *
deliver_names(PyObject *names, const uint8_t *d, Py_ssize_t at, Py_ssize_t stop, uint64_t *tag, int *bits)
{
    if (at >= stop)
        return NULL;
    Py_ssize_t tag_at = at + 1 + d[at];
    if (tag_at + 9 > stop)
        return NULL;
    *tag = be64(d + tag_at);
    *bits = d[tag_at + 8];
    /* the frame less the tag and the octet: consumer tag, then exchange and routing key */
    Py_ssize_t head = tag_at - at, tail = stop - (tag_at + 9);
    uint8_t local[512];
    uint8_t *key = head + tail <= (Py_ssize_t)sizeof local ? local : PyMem_Malloc((size_t)(head + tail));
    if (key == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(key, d + at, (size_t)head);
    memcpy(key + head, d + tag_at + 9, (size_t)tail);
    PyObject *known = lookup(names, key, head + tail);
    if (key != local)
        PyMem_Free(key);
    if (known == NULL || !PyTuple_CheckExact(known) || PyTuple_GET_SIZE(known) != 3)
        return NULL;
    return known;
}

/* One delivery from ``offset`` appended to ``events``: the offset after it, 0 when there is none
 * to read here (the Python code reads the frame at ``offset``), -1 on an error (set). */
static Py_ssize_t
one(const uint8_t *d, Py_ssize_t offset, Py_ssize_t end, PyObject *channels, PyObject *properties,
    PyObject *names, PyObject *delivery_type, PyObject *events, long *idle_channel_seen)
{
    if (end - offset < 8 || d[offset] != FRAME_METHOD)
        return 0;
    unsigned channel = ((unsigned)d[offset + 1] << 8) | d[offset + 2];
    Py_ssize_t size = be32(d + offset + 3);
    Py_ssize_t start = offset + 7, stop = start + size; /* the method frame's payload */
    if (end - offset < size + 8 || d[stop] != FRAME_END || size < 4
        || memcmp(d + start, "\x00\x3c\x00\x3c", 4) != 0)
        return 0;
    /* the content header */
    Py_ssize_t at = stop + 1;
    if (end - at < 8 || d[at] != FRAME_HEADER || (((unsigned)d[at + 1] << 8) | d[at + 2]) != channel)
        return 0;
    Py_ssize_t header_size = be32(d + at + 3), header_stop = at + 7 + header_size;
    if (header_size < 14 || header_size >= end - at - 7 || d[header_stop] != FRAME_END
        || d[at + 7] != 0x00 || d[at + 8] != 0x3c)
        return 0;
    uint64_t body_size = be64(d + at + 11);
    PyObject *content = lookup(properties, d + at + 19, header_stop - (at + 19));
    if (content == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (*idle_channel_seen != (long)channel) {
        int idle = idle_channel(channels, channel);
        if (idle <= 0)
            return idle;
        *idle_channel_seen = (long)channel;
    }
    at = header_stop + 1;
    Py_ssize_t body_at = at;
    if (body_size) {
        if (end - at < 8 || d[at] != FRAME_BODY || (((unsigned)d[at + 1] << 8) | d[at + 2]) != channel
            || (uint64_t)be32(d + at + 3) != body_size || (Py_ssize_t)body_size >= end - at - 7
            || d[at + 7 + body_size] != FRAME_END)
            return 0;
        body_at = at + 7;
        at += 8 + (Py_ssize_t)body_size;
    }
    uint64_t tag;
    int bits;
    PyObject *known = deliver_names(names, d, start + 4, stop, &tag, &bits);
    if (known == NULL)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *fields = PyTuple_New(7);
    if (fields == NULL)
        return -1;
    PyObject *number = PyLong_FromUnsignedLong(channel), *delivery_tag = PyLong_FromUnsignedLongLong(tag);
    PyObject *body = PyBytes_FromStringAndSize((const char *)d + body_at, (Py_ssize_t)body_size);
    PyObject *redelivered = (bits & 1) ? Py_True : Py_False;
    PyObject *exchange = PyTuple_GET_ITEM(known, 1), *routing_key = PyTuple_GET_ITEM(known, 2);
    Py_INCREF(redelivered);
    Py_INCREF(exchange);
    Py_INCREF(routing_key);
    Py_INCREF(content);
    PyTuple_SET_ITEM(fields, 0, number);
    PyTuple_SET_ITEM(fields, 1, delivery_tag);
    PyTuple_SET_ITEM(fields, 2, redelivered);
    PyTuple_SET_ITEM(fields, 3, exchange);
    PyTuple_SET_ITEM(fields, 4, routing_key);
    PyTuple_SET_ITEM(fields, 5, content);
    PyTuple_SET_ITEM(fields, 6, body);
    if (number == NULL || delivery_tag == NULL || body == NULL) {
        Py_DECREF(fields);
        return -1;
    }
    /* a NamedTuple: tuple.__new__(delivery_type, fields), as amqp091 builds one */
    PyObject *arguments = PyTuple_Pack(1, fields);
    Py_DECREF(fields);
    if (arguments == NULL)
        return -1;
    PyObject *delivery = PyTuple_Type.tp_new((PyTypeObject *)delivery_type, arguments, NULL);
    Py_DECREF(arguments);
    if (delivery == NULL)
        return -1;
    int appended = PyList_Append(events, delivery);
    Py_DECREF(delivery);
    return appended < 0 ? -1 : at;
}

PyDoc_STRVAR(read_doc,
"read(buffer, offset, channels, properties, names, delivery_type, events, /) -> offset\n"
"\n"
"Append the whole deliveries in a row from ``offset`` in ``buffer`` (a bytearray) to ``events``\n"
"and return the offset of the first frame not read (see the module's source for the contract).");

static PyObject *
read_deliveries(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "read() takes exactly 7 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *buffer = args[0], *channels = args[2], *properties = args[3], *names = args[4];
    PyObject *delivery_type = args[5], *events = args[6];
    if (!PyByteArray_CheckExact(buffer) || !PyDict_CheckExact(channels) || !PyDict_CheckExact(properties)
        || !PyDict_CheckExact(names) || !PyType_Check(delivery_type)
        || !PyType_IsSubtype((PyTypeObject *)delivery_type, &PyTuple_Type) || !PyList_CheckExact(events)) {
        PyErr_SetString(PyExc_TypeError, "read(bytearray, int, dict, dict, dict, tuple type, list)");
        return NULL;
    }
    Py_ssize_t offset = PyLong_AsSsize_t(args[1]);
    if (offset == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t end = PyByteArray_GET_SIZE(buffer);
    if (offset < 0 || offset > end) {
        PyErr_SetString(PyExc_ValueError, "read(): offset outside the buffer");
        return NULL;
    }
    /* the buffer does not change meanwhile: nothing here runs Python code that could hold it
       (dict lookups of bytes keys, the channel's attribute, tuple and list building) */
    const uint8_t *d = (const uint8_t *)PyByteArray_AS_STRING(buffer);
    long idle_seen = -1;
    for (;;) {
        Py_ssize_t after = one(d, offset, end, channels, properties, names, delivery_type, events, &idle_seen);
        if (after < 0)
            return NULL;
        if (after == 0)
            break;
        offset = after;
    }
    return PyLong_FromSsize_t(offset);
}

static PyMethodDef methods[] = {
    {"read", (PyCFunction)(void (*)(void))read_deliveries, METH_FASTCALL, read_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef deliveries_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "interchange.bridges.if2._deliveries",
    .m_doc = "C reader of whole AMQP 0-9-1 deliveries (basic.deliver, content header, body); "
             "interchange.bridges.if2.amqp091 is the reference.",
    .m_size = 0,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__deliveries(void)
{
    return PyModule_Create(&deliveries_module);
}
