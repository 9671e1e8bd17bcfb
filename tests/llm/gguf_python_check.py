#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Test-data script (never used at run time): cross-checks tandem's GGUF writer and reader against
# the Python `gguf` package (pip install gguf numpy, in a virtual environment).
#   python3 tests/llm/gguf_python_check.py
# 1. Reads tests/fuzz/corpus/gguf/all_types.gguf (written by tandem's GgufWriter) and checks its
#    metadata and tensor table as the Python reader sees them.
# 2. Rewrites tests/fuzz/corpus/gguf/python_writer.gguf with the Python GGUFWriter; the C++ test
#    GgufReader.ReadsFilesFromThePythonWriter reads it back.
import pathlib

import gguf
import numpy as np

corpus = pathlib.Path(__file__).resolve().parent.parent / "fuzz" / "corpus" / "gguf"

r = gguf.GGUFReader(str(corpus / "all_types.gguf"))
expect = {"general.architecture": "llama", "llama.block_count": 2, "flag": True, "i8": -3,
          "u16": 7, "i16": -7, "i64": -9, "u64": 9, "f64": 0.5, "u8": 1,
          "tokenizer.ggml.tokens": ["a", "b", "ab", "<s>"],
          "tokenizer.ggml.token_type": [1, 1, 1, 3]}
for key, value in expect.items():
    got = r.fields[key].contents()
    assert got == value, (key, got, value)
tensors = {t.name: t for t in r.tensors}
assert tensors["f32"].tensor_type.name == "F32" and tensors["f32"].data.tolist() == [[1, 2], [3, 4]]
assert [tensors[n].tensor_type.name for n in ("q8_0", "q4_0", "q4_1", "bf16", "i8t", "i32t",
                                             "q4_k")] == ["Q8_0", "Q4_0", "Q4_1", "BF16", "I8",
                                                          "I32", "Q4_K"]
print("python gguf reads tandem's all_types.gguf: ok")

w = gguf.GGUFWriter(str(corpus / "python_writer.gguf"), "llama")
w.add_block_count(1)
w.add_uint64("u64", 2**63 + 5)
w.add_array("floats", [0.5, 1.5])
w.add_string("s", "python")
w.add_bool("b", False)
w.add_array("nested", [[1, 2], [3]])
w.add_tensor("w", np.arange(12, dtype=np.float32).reshape(3, 4))
w.add_tensor("h", np.ones((2, 32), dtype=np.float16))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print("wrote", corpus / "python_writer.gguf")
