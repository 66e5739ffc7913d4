"""The one compiled part: the tcp transport's timed loops (src/fabricbench/_tcploop.c).

It is optional: without a C compiler the install still succeeds and the tcp
transport times its loops in Python, which every row's ``method`` column says.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("fabricbench._tcploop", ["src/fabricbench/_tcploop.c"], extra_compile_args=["-O2"], optional=True)
    ]
)
