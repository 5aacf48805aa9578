# lit configuration: every *.tir / *.tg file here is a test whose RUN lines use tgc and FileCheck.
import os
import lit.formats

config.name = "tgc"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".tir", ".tg", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = lit_config.params.get("exec_root", "/tmp/tgc-lit")

tgc = lit_config.params.get("tgc")
tools = lit_config.params.get("llvm_tools", "/usr/lib/llvm-19/bin")
if not tgc:
    lit_config.fatal("pass --param tgc=/path/to/tgc")
config.substitutions.append(("%tgc", tgc))
config.substitutions.append(("FileCheck", os.path.join(tools, "FileCheck")))
config.substitutions.append(("%not", os.path.join(tools, "not")))
config.environment["PATH"] = os.pathsep.join([tools, os.environ.get("PATH", "")])
