#pragma once
// A named parameter range: elements [begin, end) of the row-major flattening of tensor `name`
// (its full shape and element type recorded with it), stored at byte `offset` of a shard. A
// checkpoint's layout is the set of these over all shards: whoever owns a piece of a tensor
// (a pipeline stage, a ZeRO shard of an optimizer) writes that piece, and a loader of any
// other sharding reads the ranges it needs by name, wherever they are.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tpipe/core/checked.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/core/json.hpp"
#include "tpipe/state/dtype.hpp"
#include "tpipe/state/manifest_field.hpp"

namespace tpipe::state {

struct named_range {
    std::string name;
    std::string dtype = "f32";
    std::vector<std::int64_t> shape;  //!< of the whole tensor
    std::int64_t begin = 0, end = 0;  //!< elements of the flattened tensor held here
    std::int64_t offset = 0;          //!< byte offset in the shard

    //! Elements of the whole tensor; throws tpipe::invalid_argument for a negative dimension or a
    //! count that overflows (never wraps).
    std::int64_t elements() const
    {
        std::int64_t n = 1;
        for (auto s : shape) {
            if (s < 0) throw invalid_argument("tensor \"" + name + "\" has a negative dimension " + std::to_string(s));
            n = checked_product<std::int64_t>("the element count of tensor \"" + name + "\"", n, s);
        }
        return n;
    }
    //! Bytes of the range (end >= begin); throws tpipe::invalid_argument if they overflow.
    std::int64_t bytes() const
    {
        return checked_product<std::int64_t>("the bytes of a range of tensor \"" + name + "\"", end - begin,
                                             static_cast<std::int64_t>(dtype_bytes(dtype)));
    }
    //! Same tensor: name, dtype and shape (the ranges may differ).
    bool same_tensor(const named_range& o) const { return name == o.name && dtype == o.dtype && shape == o.shape; }

    json::value to_json() const
    {
        json::array dims(shape.begin(), shape.end());  // built in place: push_back of a temporary
                                                       // json::value drew 9 false -Wmaybe-uninitialized
                                                       // from GCC 12 -O2 in users' code (std::variant's move)
        return json::object{{"name", name},   {"dtype", dtype},   {"shape", std::move(dims)},
                            {"begin", begin}, {"end", end},       {"offset", offset}};
    }
    //! Reads and checks one range of a manifest: integers where integers (in 0 .. 2^53 - 1), a
    //! known dtype, elements inside the tensor, and a tensor of at most 2^53 - 1 elements. Throws
    //! tpipe::error naming the field by `where` ("shards[0].ranges[2]").
    static named_range from_json(const json::value& v, const std::string& where)
    {
        named_range r;
        r.name = field::text(v, where, "name");
        r.dtype = field::text(v, where, "dtype");
        try {
            dtype_bytes(r.dtype);
        } catch (const parse_error& e) {
            throw parse_error(field::path(where, "dtype") + ": " + e.what());
        }
        const json::array& dims = field::array(v, where, "shape");
        std::int64_t n = 1;
        for (std::size_t k = 0; k < dims.size(); ++k) {
            const std::string dim = field::path(where, "shape") + "[" + std::to_string(k) + "]";
            r.shape.push_back(field::integer_value(dims[k], dim));
            n = checked_product<std::int64_t>(field::path(where, "shape") + "'s element count", n, r.shape.back());
            if (n > field::max_integer)
                throw parse_error(field::path(where, "shape") + " " + json::dump(v.at("shape")) + " has more than 2^53 - 1 elements");
        }
        r.begin = field::integer(v, where, "begin");
        r.end = field::integer(v, where, "end");
        r.offset = field::integer(v, where, "offset");
        if (r.end < r.begin || r.end > n)
            throw parse_error(where + ": elements [" + std::to_string(r.begin) + ", " + std::to_string(r.end) +
                              ") do not fit tensor \"" + r.name + "\" of " + std::to_string(n) + " elements");
        return r;
    }
};

} // namespace tpipe::state
