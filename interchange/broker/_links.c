/*
 * interchange.broker._links: optional C path of a consumer link's deliveries and their settlements.
 *
 * The broker's engine (engine.py) drives proton through cffi: every proton call from Python costs
 * a cffi conversion, and a consumer's dispositions come back as one PN_DELIVERY event per message.
 * These two functions do the same calls in C, with proton's functions as cffi gives their addresses
 * (``bind``: the very library the engine uses, not one linked here):
 *
 * bind(functions, delivery_event, released, modified)
 *     ``functions``: the addresses of pn_collector_peek, pn_collector_pop, pn_event_type,
 *     pn_event_delivery, pn_delivery_link, pn_delivery_updated, pn_delivery_remote_state,
 *     pn_delivery_settled, pn_delivery_settle, pn_delivery, pn_link_send, pn_link_advance,
 *     pn_delivery_aborted, pn_delivery_readable, pn_delivery_partial, pn_delivery_pending, pn_link_recv
 *     and pn_delivery_update, in that order; the PN_DELIVERY event type and the RELEASED and
 *     MODIFIED outcomes.
 *
 * deliver(link, tag, raw) -> delivery
 *     A delivery on ``link`` (an address) tagged with ``tag`` (8 bytes, big-endian) carrying the
 *     bytes of ``raw`` unchanged, and the link advanced: ConsumerLinkState.send's three calls. Its
 *     address is returned (the key of the link's unsettled messages).
 *
 * deliver_run(link, tag, messages, unsettled) -> int
 *     deliver() of each message of the list ``messages`` (its ``raw``: bytes-like), tagged ``tag + 1``,
 *     ``tag + 2``, ...: ConsumerLinkState.send_run's loop; each message put in the dict ``unsettled``
 *     under its delivery's address. Returns how many were sent (all, or those before an error).
 *
 * settled(collector, consumers, durable) -> int
 *     Handles the events at the head of ``collector`` for as long as each is a PN_DELIVERY on a
 *     consumer link (``consumers``: link address -> its ConsumerLinkState) that ConnectionLinks
 *     would only settle: not updated, or no outcome and not settled (nothing to do); or accepted,
 *     rejected or settled (the message leaves ``state.unsettled``, keyed by the delivery's address,
 *     the delivery is settled, and a durable message, ``holders`` not None, is appended to
 *     ``durable`` as (state, message) for the router's ``consumed``). Each handled event is popped.
 *     It stops, without popping, at the first other event (a publisher's message, a released or
 *     modified delivery: given back to its source by Python; a connection or link event) and
 *     returns how many it handled: what it stops at is Python's to handle, so this decides nothing
 *     the Python code would decide differently.
 *
 * received(collector, publishers, max_size, copy_limit, messages) -> int
 *     The same for a publisher's deliveries (``publishers``: link address -> any object, given back):
 *     one not readable yet, or partial and not over ``max_size``, is left as it is (nothing to do);
 *     a whole message of at most ``min(max_size, copy_limit)`` bytes is read into a bytes object,
 *     the link advanced, and (that object, the delivery's address, the bytes, whether the
 *     publisher sent it settled) appended to ``messages`` for Python to route and answer
 *     (``dispose``). It stops at an aborted delivery, one over a limit, a settlement, any other event.
 *
 * dispose(delivery, outcome)
 *     ``outcome`` (when not 0) as the delivery's disposition, then the delivery settled.
 *
 * Without bind (or without this module) the engine makes the same calls from Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    size_t size;
    const char *start;
} pn_bytes; /* proton's pn_bytes_t (pn_delivery_tag_t) */

typedef void *(*peek_f)(void *);
typedef bool (*pop_f)(void *);
typedef int (*event_type_f)(void *);
typedef void *(*event_delivery_f)(void *);
typedef void *(*delivery_link_f)(void *);
typedef bool (*delivery_bool_f)(void *);
typedef uint64_t (*remote_state_f)(void *);
typedef void (*settle_f)(void *);
typedef void *(*delivery_f)(void *, pn_bytes);
typedef ssize_t (*link_send_f)(void *, const char *, size_t);
typedef bool (*advance_f)(void *);
typedef size_t (*pending_f)(void *);
typedef ssize_t (*link_recv_f)(void *, char *, size_t);
typedef void (*update_f)(void *, uint64_t);

static struct {
    peek_f peek;
    pop_f pop;
    event_type_f event_type;
    event_delivery_f event_delivery;
    delivery_link_f delivery_link;
    delivery_bool_f updated;
    remote_state_f remote_state;
    delivery_bool_f settled;
    settle_f settle;
    delivery_f delivery;
    link_send_f link_send;
    advance_f advance;
    delivery_bool_f aborted, readable, partial;
    pending_f pending;
    link_recv_f link_recv;
    update_f update;
    int delivery_event;
    uint64_t released, modified;
    bool bound;
} pn;

static PyObject *str_unsettled, *str_holders;

static PyObject *
bind(PyObject *self, PyObject *args)
{
    PyObject *functions;
    int delivery_event;
    unsigned long long released, modified;
    if (!PyArg_ParseTuple(args, "O!iKK", &PyTuple_Type, &functions, &delivery_event, &released, &modified))
        return NULL;
    if (PyTuple_GET_SIZE(functions) != 18) {
        PyErr_SetString(PyExc_ValueError, "bind: 18 function addresses expected");
        return NULL;
    }
    void *address[18];
    for (Py_ssize_t i = 0; i < 18; i++) {
        address[i] = PyLong_AsVoidPtr(PyTuple_GET_ITEM(functions, i));
        if (address[i] == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "bind: a null function address");
            return NULL;
        }
    }
    pn.peek = (peek_f)address[0];
    pn.pop = (pop_f)address[1];
    pn.event_type = (event_type_f)address[2];
    pn.event_delivery = (event_delivery_f)address[3];
    pn.delivery_link = (delivery_link_f)address[4];
    pn.updated = (delivery_bool_f)address[5];
    pn.remote_state = (remote_state_f)address[6];
    pn.settled = (delivery_bool_f)address[7];
    pn.settle = (settle_f)address[8];
    pn.delivery = (delivery_f)address[9];
    pn.link_send = (link_send_f)address[10];
    pn.advance = (advance_f)address[11];
    pn.aborted = (delivery_bool_f)address[12];
    pn.readable = (delivery_bool_f)address[13];
    pn.partial = (delivery_bool_f)address[14];
    pn.pending = (pending_f)address[15];
    pn.link_recv = (link_recv_f)address[16];
    pn.update = (update_f)address[17];
    pn.delivery_event = delivery_event;
    pn.released = released;
    pn.modified = modified;
    pn.bound = true;
    Py_RETURN_NONE;
}

static int
check_bound(void)
{
    if (!pn.bound) {
        PyErr_SetString(PyExc_RuntimeError, "interchange.broker._links: bind() first");
        return -1;
    }
    return 0;
}

static PyObject *
deliver(PyObject *self, PyObject *args)
{
    PyObject *link_address;
    unsigned long long tag;
    Py_buffer raw;
    if (!PyArg_ParseTuple(args, "OKy*", &link_address, &tag, &raw))
        return NULL;
    void *link = PyLong_AsVoidPtr(link_address);
    if ((link == NULL && PyErr_Occurred()) || check_bound() < 0) {
        PyBuffer_Release(&raw);
        return NULL;
    }
    char tag_bytes[8];
    for (int i = 7; i >= 0; i--, tag >>= 8)
        tag_bytes[i] = (char)(tag & 0xFF);
    pn_bytes dtag = {8, tag_bytes};
    void *delivery = pn.delivery(link, dtag);
    pn.link_send(link, (const char *)raw.buf, (size_t)raw.len);
    pn.advance(link);
    PyBuffer_Release(&raw);
    return PyLong_FromVoidPtr(delivery);
}

static PyObject *str_raw;

/* One delivery of ``raw`` tagged ``tag`` on ``link``, the link advanced: deliver()'s calls. */
static void *
deliver_one(void *link, unsigned long long tag, const Py_buffer *raw)
{
    char tag_bytes[8];
    for (int i = 7; i >= 0; i--, tag >>= 8)
        tag_bytes[i] = (char)(tag & 0xFF);
    pn_bytes dtag = {8, tag_bytes};
    void *delivery = pn.delivery(link, dtag);
    pn.link_send(link, (const char *)raw->buf, (size_t)raw->len);
    pn.advance(link);
    return delivery;
}

static PyObject *
deliver_run(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *link_address, *messages, *unsettled;
    unsigned long long tag;
    if (!PyArg_ParseTuple(args, "OKO!O!", &link_address, &tag, &PyList_Type, &messages, &PyDict_Type, &unsettled))
        return NULL;
    void *link = PyLong_AsVoidPtr(link_address);
    if ((link == NULL && PyErr_Occurred()) || check_bound() < 0)
        return NULL;
    Py_ssize_t sent = 0;
    for (; sent < PyList_GET_SIZE(messages); sent++) {
        PyObject *message = PyList_GET_ITEM(messages, sent);
        Py_INCREF(message);
        PyObject *raw_object = PyObject_GetAttr(message, str_raw);
        Py_buffer raw;
        if (raw_object == NULL || PyObject_GetBuffer(raw_object, &raw, PyBUF_SIMPLE) < 0) {
            Py_XDECREF(raw_object);
            Py_DECREF(message);
            break;
        }
        void *delivery = deliver_one(link, tag + 1 + (unsigned long long)sent, &raw);
        PyBuffer_Release(&raw);
        Py_DECREF(raw_object);
        PyObject *key = PyLong_FromVoidPtr(delivery);
        int stored = key != NULL ? PyDict_SetItem(unsettled, key, message) : -1;
        Py_XDECREF(key);
        Py_DECREF(message);
        if (stored < 0)
            break;
    }
    if (PyErr_Occurred())
        return NULL; /* (what was sent is in ``unsettled``, but for a failed store: the caller counts it) */
    return PyLong_FromSsize_t(sent);
}

/* The link's ConsumerLinkState (borrowed), NULL when the link is not a consumer's (or an error is set). */
static PyObject *
consumer_of(PyObject *consumers, void *link)
{
    PyObject *key = PyLong_FromVoidPtr(link);
    if (key == NULL)
        return NULL;
    PyObject *state = PyDict_GetItemWithError(consumers, key);
    Py_DECREF(key);
    return state;
}

/* ``state.unsettled.pop(address of delivery, None)``, then the delivery settled; a durable message
 * appended to ``durable`` with its state. 0, or -1 with an error set. */
static int
take_settlement(PyObject *state, void *delivery, PyObject *durable)
{
    PyObject *unsettled = PyObject_GetAttr(state, str_unsettled);
    if (unsettled == NULL)
        return -1;
    if (!PyDict_Check(unsettled)) {
        Py_DECREF(unsettled);
        PyErr_SetString(PyExc_TypeError, "a consumer's unsettled messages must be a dict");
        return -1;
    }
    PyObject *key = PyLong_FromVoidPtr(delivery);
    if (key == NULL) {
        Py_DECREF(unsettled);
        return -1;
    }
    PyObject *message = PyDict_GetItemWithError(unsettled, key); /* borrowed */
    int status = 0;
    if (message != NULL) {
        Py_INCREF(message);
        status = PyDict_DelItem(unsettled, key);
    } else if (PyErr_Occurred()) {
        status = -1;
    }
    Py_DECREF(key);
    Py_DECREF(unsettled);
    if (status < 0) {
        Py_XDECREF(message);
        return -1;
    }
    pn.settle(delivery);
    if (message == NULL)
        return 0;
    PyObject *holders = PyObject_GetAttr(message, str_holders);
    if (holders == NULL) {
        Py_DECREF(message);
        return -1;
    }
    if (holders != Py_None) {
        PyObject *pair = PyTuple_Pack(2, state, message);
        status = pair == NULL ? -1 : PyList_Append(durable, pair);
        Py_XDECREF(pair);
    }
    Py_DECREF(holders);
    Py_DECREF(message);
    return status;
}

/* The collector at ``address`` (an int), the proton functions bound; NULL with a Python error. */
static void *
collector_at(PyObject *address)
{
    void *collector = PyLong_AsVoidPtr(address);
    if ((collector == NULL && PyErr_Occurred()) || check_bound() < 0)
        return NULL;
    return collector;
}

/* 1 when the event at the head of ``collector`` is a delivery's on a link of ``links`` (the delivery
 * in ``*delivery``, the link's value in ``*state``, borrowed); 0 at any other event or none (the
 * caller stops there, the event left for Python); -1 with a Python error. */
static int
next_delivery(void *collector, PyObject *links, void **delivery, PyObject **state)
{
    void *event = pn.peek(collector);
    if (event == NULL || pn.event_type(event) != pn.delivery_event)
        return 0;
    *delivery = pn.event_delivery(event);
    *state = consumer_of(links, pn.delivery_link(*delivery));
    if (*state == NULL)
        return PyErr_Occurred() ? -1 : 0;
    return 1;
}

static PyObject *
settled(PyObject *self, PyObject *args)
{
    PyObject *collector_address, *consumers, *durable;
    if (!PyArg_ParseTuple(args, "OO!O!", &collector_address, &PyDict_Type, &consumers, &PyList_Type, &durable))
        return NULL;
    void *collector = collector_at(collector_address);
    if (collector == NULL)
        return NULL;
    long handled = 0;
    void *delivery;
    PyObject *state;
    int next;
    while ((next = next_delivery(collector, consumers, &delivery, &state)) > 0) { /* (0: a publisher's delivery) */
        if (pn.updated(delivery)) {
            uint64_t outcome = pn.remote_state(delivery);
            if (outcome == pn.released || outcome == pn.modified)
                break; /* back to its source: Python's */
            if ((outcome != 0 || pn.settled(delivery)) && take_settlement(state, delivery, durable) < 0)
                return NULL;
        }
        pn.pop(collector);
        handled++;
    }
    return next < 0 ? NULL : PyLong_FromLong(handled);
}

/* A whole message of ``size`` bytes of ``link``'s current delivery as bytes, the link advanced. */
static PyObject *
read_message(void *link, size_t size)
{
    PyObject *raw = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (raw == NULL)
        return NULL;
    ssize_t got = size ? pn.link_recv(link, PyBytes_AS_STRING(raw), size) : 0;
    pn.advance(link);
    if (got != (ssize_t)size && _PyBytes_Resize(&raw, got > 0 ? (Py_ssize_t)got : 0) < 0)
        return NULL;
    return raw;
}

static PyObject *
received(PyObject *self, PyObject *args)
{
    PyObject *collector_address, *publishers, *messages;
    Py_ssize_t max_size, copy_limit;
    if (!PyArg_ParseTuple(args, "OO!nnO!", &collector_address, &PyDict_Type, &publishers, &max_size, &copy_limit,
                          &PyList_Type, &messages))
        return NULL;
    void *collector = collector_at(collector_address);
    if (collector == NULL)
        return NULL;
    size_t limit = (size_t)(max_size < copy_limit ? max_size : copy_limit);
    long handled = 0;
    void *delivery;
    PyObject *publisher;
    int next;
    while ((next = next_delivery(collector, publishers, &delivery, &publisher)) > 0) { /* (0: a consumer's settlement) */
        void *link = pn.delivery_link(delivery);
        if (pn.aborted(delivery))
            break;
        if (pn.readable(delivery)) {
            size_t size = pn.pending(delivery);
            if (size > (size_t)max_size)
                break;
            if (!pn.partial(delivery)) {
                if (size > limit)
                    break;
                PyObject *raw = read_message(link, size);
                if (raw == NULL)
                    return NULL;
                PyObject *key = PyLong_FromVoidPtr(delivery);
                PyObject *entry = key == NULL ? NULL
                    : PyTuple_Pack(4, publisher, key, raw, pn.settled(delivery) ? Py_True : Py_False);
                Py_XDECREF(key);
                Py_DECREF(raw);
                if (entry == NULL)
                    return NULL;
                int status = PyList_Append(messages, entry);
                Py_DECREF(entry);
                if (status < 0)
                    return NULL;
            }
        }
        pn.pop(collector);
        handled++;
    }
    return next < 0 ? NULL : PyLong_FromLong(handled);
}

static PyObject *
dispose(PyObject *self, PyObject *args)
{
    PyObject *delivery_address;
    unsigned long long outcome;
    if (!PyArg_ParseTuple(args, "OK", &delivery_address, &outcome))
        return NULL;
    void *delivery = PyLong_AsVoidPtr(delivery_address);
    if ((delivery == NULL && PyErr_Occurred()) || check_bound() < 0)
        return NULL;
    if (outcome)
        pn.update(delivery, (uint64_t)outcome);
    pn.settle(delivery);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_VARARGS, "bind(functions, delivery_event, released, modified): proton's functions"},
    {"deliver", deliver, METH_VARARGS, "deliver(link, tag, raw) -> delivery address"},
    {"deliver_run", deliver_run, METH_VARARGS, "deliver_run(link, tag, messages, unsettled) -> how many were sent"},
    {"settled", settled, METH_VARARGS, "settled(collector, consumers, durable) -> events handled"},
    {"received", received, METH_VARARGS, "received(collector, publishers, max_size, copy_limit, messages) -> events handled"},
    {"dispose", dispose, METH_VARARGS, "dispose(delivery, outcome): its disposition (when not 0), settled"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "interchange.broker._links",
    "C path of a consumer link's deliveries and their settlements (see the source's comment).", -1, methods,
};

PyMODINIT_FUNC
PyInit__links(void)
{
    str_unsettled = PyUnicode_InternFromString("unsettled");
    str_holders = PyUnicode_InternFromString("holders");
    str_raw = PyUnicode_InternFromString("raw");
    if (str_unsettled == NULL || str_holders == NULL || str_raw == NULL)
        return NULL;
    return PyModule_Create(&module);
}
