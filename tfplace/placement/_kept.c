/* An eager op's kept record, found and written in C: the first look-up of the op callback
 * (`tfplace.placement._callback.Hook.__call__`), without a Python frame per op.
 *
 * `Callback(call, hook, session, copying)` (`copying`: the kind of an op whose inputs may be copied) is what TensorFlow's op callback lists hold while a capture
 * listens (`Hook.full_callback`). Per op it reads what the Python callback reads first: the session's
 * `waiting`, the op's device, the thread's `tf.device` scope and who entered it (`session.asked.scope`, which
 * `_hooks` mirrors), and the frames at the depths the hook's kept entries name
 * (`Hook.seen`, filled by `Hook._learn`); an op whose kept entry matches, and whose inputs all live where it
 * ran, goes to the listeners here. Anything else (a function call, an op made while a function is traced,
 * an op seen for the first time, a copy, an error) is handed whole to `call`, the hook's `__call__`, which
 * decides it as it would without this module (and, when a listener raised here, decides it again: it raises a
 * guard's verdict and reports tfplace's own failures). `Hook.update` gives it the hook's entries and listeners
 * (`set`). Built where a C compiler is present; without it the hook runs its Python callback alone.
 *
 *     >>> from tfplace.placement import _kept   # doctest: +SKIP
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *call;      /* the hook's __call__: every op this module does not decide */
    PyObject *hook;      /* the hook (`__self__`, as a bound method has) */
    PyObject *session;   /* its capture session's attributes (its `__dict__`): `waiting`, `asked` */
    PyObject *copying;   /* the kind of an op whose inputs may be copied (`_eager.OP`) */
    PyObject *seen;      /* op type -> [(depth, code, {lasti: [entry, ...]})] (`Hook.seen`) */
    PyObject *sink;      /* the one listener's writer of a record alone, or None */
    PyObject *calls;     /* ((on_op, sources), ...) */
    PyObject *outputs;   /* ((on_outputs, sources), ...): the listeners that count the tensors ops return */
} Callback;

static PyObject *s_waiting, *s_asked, *s_scope, *s_device, *s_backing_device, *s_graph, *s_f_lasti;
static PyObject *getframe, *no_copies;

/* The frame `depth` frames out of the Python callback (`sys._getframe(depth)` inside `Hook.__call__`; this
 * callable has no frame, so one fewer here), or NULL with no error when the stack is shallower. */
static PyObject *frame_at(Py_ssize_t depth) {
    PyObject *level, *frame;
    if (depth < 1) return NULL;
    level = PyLong_FromSsize_t(depth - 1);
    if (level == NULL) { PyErr_Clear(); return NULL; }
    frame = PyObject_CallOneArg(getframe, level);
    Py_DECREF(level);
    if (frame == NULL) PyErr_Clear();
    return frame;
}

static long lasti_of(PyObject *frame) {
#if PY_VERSION_HEX >= 0x030B0000
    return PyFrame_GetLasti((PyFrameObject *)frame);
#else
    PyObject *value = PyObject_GetAttr(frame, s_f_lasti);
    long lasti;
    if (value == NULL) { PyErr_Clear(); return -2; }
    lasti = PyLong_AsLong(value);
    Py_DECREF(value);
    if (lasti == -1 && PyErr_Occurred()) { PyErr_Clear(); return -2; }
    return lasti;
#endif
}

/* `_callback._same_call`: the frame `depth` frames out runs `code` at instruction `lasti` (an entry's user frame). */
static int same_call(PyObject *user) {
    PyObject *frame, *code;
    Py_ssize_t depth;
    long lasti;
    int same;
    if (!PyTuple_Check(user) || PyTuple_GET_SIZE(user) != 3) return 0;
    depth = PyLong_AsSsize_t(PyTuple_GET_ITEM(user, 0));
    lasti = PyLong_AsLong(PyTuple_GET_ITEM(user, 2));
    if (PyErr_Occurred()) { PyErr_Clear(); return 0; }
    frame = frame_at(depth);
    if (frame == NULL) return 0;
    code = (PyObject *)PyFrame_GetCode((PyFrameObject *)frame);
    same = code == PyTuple_GET_ITEM(user, 1) && lasti_of(frame) == lasti;
    Py_DECREF(code);
    Py_DECREF(frame);
    return same;
}

static int equal(PyObject *a, PyObject *b) {
    int result;
    if (a == b) return 1;
    result = PyObject_RichCompareBool(a, b, Py_EQ);
    if (result < 0) { PyErr_Clear(); return 0; }
    return result;
}

/* The kept entry for this op, a new reference, or NULL (no error) when none matches. */
static PyObject *kept_entry(Callback *self, PyObject *op_type, PyObject *full, PyObject *requested, PyObject *by,
                            PyObject *attrs) {
    PyObject *groups, *found = NULL;
    Py_ssize_t g;
    groups = PyDict_GetItemWithError(self->seen, op_type);
    if (groups == NULL) { PyErr_Clear(); return NULL; }
    Py_INCREF(groups);
    for (g = 0; PyList_Check(groups) && g < PyList_GET_SIZE(groups); g++) {
        PyObject *group = PyList_GET_ITEM(groups, g), *frame, *code, *entries, *key;
        Py_ssize_t depth, e;
        long lasti;
        if (!PyTuple_Check(group) || PyTuple_GET_SIZE(group) != 3) break;
        depth = PyLong_AsSsize_t(PyTuple_GET_ITEM(group, 0));
        if (depth == -1 && PyErr_Occurred()) { PyErr_Clear(); break; }
        frame = frame_at(depth);
        if (frame == NULL) continue;  /* the stack is shallower this time */
        code = (PyObject *)PyFrame_GetCode((PyFrameObject *)frame);
        Py_DECREF(code);  /* the frame holds it */
        if (code != PyTuple_GET_ITEM(group, 1)) { Py_DECREF(frame); continue; }
        lasti = lasti_of(frame);
        Py_DECREF(frame);
        key = PyLong_FromLong(lasti);
        if (key == NULL) { PyErr_Clear(); break; }
        Py_INCREF(group);  /* comparisons below may run Python code, and another thread `_learn` */
        entries = PyDict_GetItemWithError(PyTuple_GET_ITEM(group, 2), key);
        Py_XINCREF(entries);
        Py_DECREF(group);
        Py_DECREF(key);
        if (entries == NULL) { PyErr_Clear(); break; }
        for (e = 0; PyList_Check(entries) && e < PyList_GET_SIZE(entries); e++) {
            PyObject *entry = PyList_GET_ITEM(entries, e);
            if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 8) continue;
            Py_INCREF(entry);
            if (equal(PyTuple_GET_ITEM(entry, 1), full) && equal(PyTuple_GET_ITEM(entry, 2), requested)
                    && equal(PyTuple_GET_ITEM(entry, 3), by) && equal(PyTuple_GET_ITEM(entry, 4), attrs)
                    && (PyTuple_GET_ITEM(entry, 0) == Py_None || same_call(PyTuple_GET_ITEM(entry, 0)))) {
                found = entry;
                break;
            }
            Py_DECREF(entry);
        }
        Py_DECREF(entries);
        break;
    }
    Py_DECREF(groups);
    return found;
}

/* 1 when an input's memory is on another device than `full` (or cannot be read), else 0. */
static int moved(PyObject *inputs, PyObject *full) {
    PyObject *sequence = PySequence_Fast(inputs, "inputs");
    Py_ssize_t i, n;
    int result = 0;
    if (sequence == NULL) { PyErr_Clear(); return 1; }
    n = PySequence_Fast_GET_SIZE(sequence);
    for (i = 0; i < n && !result; i++) {
        PyObject *device = PyObject_GetAttr(PySequence_Fast_ITEMS(sequence)[i], s_backing_device);
        if (device == NULL) { PyErr_Clear(); result = 1; break; }
        result = !equal(device, full);
        Py_DECREF(device);
    }
    Py_DECREF(sequence);
    return result;
}

static int each(PyObject *listeners, PyObject *record, PyObject *plain, PyObject *second) {
    Py_ssize_t i;
    for (i = 0; i < PyTuple_GET_SIZE(listeners); i++) {
        PyObject *pair = PyTuple_GET_ITEM(listeners, i), *result;
        int sources = PyObject_IsTrue(PyTuple_GET_ITEM(pair, 1));
        if (sources < 0) return -1;
        result = PyObject_CallFunctionObjArgs(PyTuple_GET_ITEM(pair, 0), sources ? record : plain, second, NULL);
        if (result == NULL) return -1;
        Py_DECREF(result);
    }
    return 0;
}

/* Hands the kept record to the listeners (those `set` gave when the op came: a listener may `set` others);
 * 0, or -1 with the listener's error set. */
static int written(Callback *self, PyObject *record, PyObject *plain, PyObject *outputs) {
    PyObject *sink = self->sink, *calls = self->calls, *counting = self->outputs, *result;
    int status = 0;
    Py_INCREF(sink); Py_INCREF(calls); Py_INCREF(counting);
    if (sink != Py_None) {
        result = PyObject_CallOneArg(sink, record);
        if (result == NULL) status = -1;
        Py_XDECREF(result);
    } else {
        status = each(calls, record, plain, no_copies);
    }
    if (status == 0) status = each(counting, record, plain, outputs);
    Py_DECREF(sink); Py_DECREF(calls); Py_DECREF(counting);
    return status;
}

static PyObject *callback_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Callback *self = (Callback *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), i;
    PyObject *outputs, *full = NULL, *asked, *scope = NULL, *entry = NULL, *waiting;
    int status;
    /* (op_type, inputs, attrs, outputs, op_name=None, graph=None): an op made in a graph is not an eager op */
    if (nargs < 4 || nargs > 6 || (nargs == 6 && args[5] != Py_None) || self->seen == NULL
            || PyTuple_GET_SIZE(self->calls) == 0) goto python;
    for (i = 0; kwnames != NULL && i < PyTuple_GET_SIZE(kwnames); i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        if ((name == s_graph || PyUnicode_Compare(name, s_graph) == 0) && args[nargs + i] != Py_None) goto python;
    }
    outputs = args[3];
    if (!(PyTuple_Check(outputs) || PyList_Check(outputs)) || PySequence_Fast_GET_SIZE(outputs) == 0) goto python;
    waiting = PyDict_GetItemWithError(self->session, s_waiting);  /* a function's graphs wait: `_graphs.start` */
    if (waiting != Py_False) goto fail;
    full = PyObject_GetAttr(PySequence_Fast_ITEMS(outputs)[0], s_device);
    if (full == NULL) goto fail;
    asked = PyDict_GetItemWithError(self->session, s_asked);
    if (asked == NULL) goto fail;
    Py_INCREF(asked);
    scope = PyObject_GetAttr(asked, s_scope);  /* (the thread's tf.device scope, who entered it) */
    Py_DECREF(asked);
    if (scope == NULL) goto fail;  /* the thread's first op since the patches went in */
    if (!PyTuple_Check(scope) || PyTuple_GET_SIZE(scope) != 2) goto done;
    entry = kept_entry(self, args[0], full, PyTuple_GET_ITEM(scope, 0), PyTuple_GET_ITEM(scope, 1), args[2]);
    if (entry == NULL) goto done;
    if (equal(PyTuple_GET_ITEM(entry, 7), self->copying) && moved(args[1], full)) goto done;
    status = written(self, PyTuple_GET_ITEM(entry, 5), PyTuple_GET_ITEM(entry, 6), outputs);
    Py_DECREF(entry);
    Py_DECREF(scope);
    Py_DECREF(full);
    if (status == 0) Py_RETURN_NONE;
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return NULL;  /* an interrupt */
    /* A listener raised: the Python callback decides the op again, and raises a guard's verdict or reports
     * tfplace's own failure (`tfplace._contained`), never raising that into the program. */
    PyErr_Clear();
    goto python;
fail:
    PyErr_Clear();
done:
    Py_XDECREF(entry);
    Py_XDECREF(scope);
    Py_XDECREF(full);
python:
    if (self->call == NULL) {  /* cleared by the garbage collector: no hook to hand the op to */
        PyErr_SetString(PyExc_RuntimeError, "Callback: cleared");
        return NULL;
    }
    return PyObject_Vectorcall(self->call, args, nargsf, kwnames);
}

static PyObject *callback_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    Callback *self;
    PyObject *call, *hook, *session, *copying;
    static char *keywords[] = {"call", "hook", "session", "copying", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO:Callback", keywords, &call, &hook, &session, &copying))
        return NULL;
    if (!PyCallable_Check(call)) {
        PyErr_Format(PyExc_TypeError, "Callback: call must be callable, got %R", call);
        return NULL;
    }
    self = (Callback *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->vectorcall = callback_vectorcall;
    Py_INCREF(call); self->call = call;
    Py_INCREF(hook); self->hook = hook;
    self->session = PyObject_GenericGetDict(session, NULL);
    Py_INCREF(copying); self->copying = copying;
    Py_INCREF(Py_None); self->sink = Py_None;
    self->calls = PyTuple_New(0);
    self->outputs = PyTuple_New(0);
    if (self->session == NULL || self->calls == NULL || self->outputs == NULL) { Py_DECREF(self); return NULL; }
    return (PyObject *)self;
}

static PyObject *callback_set(Callback *self, PyObject *args) {
    PyObject *seen, *sink, *calls, *outputs;
    Py_ssize_t i;
    if (!PyArg_ParseTuple(args, "O!OO!O!:set", &PyDict_Type, &seen, &sink, &PyTuple_Type, &calls, &PyTuple_Type, &outputs))
        return NULL;
    for (i = 0; i < PyTuple_GET_SIZE(calls) + PyTuple_GET_SIZE(outputs); i++) {
        PyObject *pair = i < PyTuple_GET_SIZE(calls) ? PyTuple_GET_ITEM(calls, i)
                                                      : PyTuple_GET_ITEM(outputs, i - PyTuple_GET_SIZE(calls));
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_Format(PyExc_TypeError, "Callback.set: listeners must be (callable, sources) pairs, got %R", pair);
            return NULL;
        }
    }
    Py_INCREF(seen); Py_XSETREF(self->seen, seen);
    Py_INCREF(sink); Py_XSETREF(self->sink, sink);
    Py_INCREF(calls); Py_XSETREF(self->calls, calls);
    Py_INCREF(outputs); Py_XSETREF(self->outputs, outputs);
    Py_RETURN_NONE;
}

static int callback_traverse(Callback *self, visitproc visit, void *arg) {
    Py_VISIT(self->call); Py_VISIT(self->hook); Py_VISIT(self->session); Py_VISIT(self->copying);
    Py_VISIT(self->seen); Py_VISIT(self->sink); Py_VISIT(self->calls); Py_VISIT(self->outputs);
    return 0;
}

static int callback_clear(Callback *self) {
    Py_CLEAR(self->call); Py_CLEAR(self->hook); Py_CLEAR(self->session); Py_CLEAR(self->copying);
    Py_CLEAR(self->seen); Py_CLEAR(self->sink); Py_CLEAR(self->calls); Py_CLEAR(self->outputs);
    return 0;
}

static void callback_dealloc(Callback *self) {
    PyObject_GC_UnTrack(self);
    callback_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}


static PyMethodDef callback_methods[] = {
    {"set", (PyCFunction)callback_set, METH_VARARGS,
     "set(seen, sink, calls, outputs): the hook's kept entries and its listeners (`Hook.update`)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef callback_members[] = {
    {"__self__", T_OBJECT, offsetof(Callback, hook), READONLY, "the hook"},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Callback, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject CallbackType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tfplace.placement._kept.Callback",
    .tp_basicsize = sizeof(Callback),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Callback(call, hook, session, copying): an op callback that writes an eager op's kept record, "
              "and hands any other op to call.",
    .tp_new = callback_new,
    .tp_dealloc = (destructor)callback_dealloc,
    .tp_traverse = (traverseproc)callback_traverse,
    .tp_clear = (inquiry)callback_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Callback, vectorcall),
    .tp_methods = callback_methods,
    .tp_members = callback_members,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kept", "An eager op's kept record, found and written in C (`Callback`).", -1, NULL,
};

PyMODINIT_FUNC PyInit__kept(void) {
    PyObject *m;
    if (PyType_Ready(&CallbackType) < 0) return NULL;
#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(s_waiting, "waiting"); INTERN(s_asked, "asked"); INTERN(s_scope, "scope");
    INTERN(s_device, "device"); INTERN(s_backing_device, "backing_device"); INTERN(s_graph, "graph");
    INTERN(s_f_lasti, "f_lasti");
#undef INTERN
    getframe = PySys_GetObject("_getframe");
    if (getframe == NULL) { PyErr_SetString(PyExc_ImportError, "_kept: sys._getframe is missing"); return NULL; }
    Py_INCREF(getframe);
    no_copies = PyTuple_New(0);
    if (no_copies == NULL) return NULL;
    m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&CallbackType);
    if (PyModule_AddObject(m, "Callback", (PyObject *)&CallbackType) < 0) {
        Py_DECREF(&CallbackType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
