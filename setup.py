"""Build of the optional C accelerators; all other project metadata is in pyproject.toml."""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "interchange.broker._admit",
            ["interchange/broker/_admit.c"],
            # _admit_profile.h is generated from the profile (admit_header.py)
            depends=["interchange/broker/_admit_profile.h", "interchange/broker/_be_bytes.h"],
            optional=True,  # without a compiler the pure-Python admission is used
            extra_compile_args=["-O2"],
        ),
        Extension(
            "interchange.broker._links",
            ["interchange/broker/_links.c"],
            optional=True,  # without a compiler the engine makes these proton calls through cffi
            extra_compile_args=["-O2"],
        ),
        Extension(
            "interchange.broker._handshake",
            ["interchange/broker/_handshake.c"],
            libraries=["ssl", "crypto"],  # the system's OpenSSL, the one CPython's _ssl is linked with
            optional=True,  # without a compiler (or OpenSSL's headers) the steps run on a Python thread
            extra_compile_args=["-O2"],
        ),
        Extension(
            "interchange.bridges.if2._deliveries",
            ["interchange/bridges/if2/_deliveries.c"],
            depends=["interchange/broker/_be_bytes.h"],
            optional=True,  # without a compiler amqp091 reads every delivery in Python
            extra_compile_args=["-O2"],
        ),
    ]
)
