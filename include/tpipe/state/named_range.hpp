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

#include "tpipe/core/error.hpp"
#include "tpipe/core/json.hpp"
#include "tpipe/state/dtype.hpp"

namespace tpipe::state {

struct named_range {
    std::string name;
    std::string dtype = "f32";
    std::vector<std::int64_t> shape;  //!< of the whole tensor
    std::int64_t begin = 0, end = 0;  //!< elements of the flattened tensor held here
    std::int64_t offset = 0;          //!< byte offset in the shard

    std::int64_t elements() const
    {
        std::int64_t n = 1;
        for (auto s : shape) n *= s;
        return n;
    }
    std::int64_t bytes() const { return (end - begin) * static_cast<std::int64_t>(dtype_bytes(dtype)); }
    //! Same tensor: name, dtype and shape (the ranges may differ).
    bool same_tensor(const named_range& o) const { return name == o.name && dtype == o.dtype && shape == o.shape; }

    json::value to_json() const
    {
        json::array dims;
        for (auto s : shape) dims.push_back(s);
        return json::object{{"name", name},   {"dtype", dtype},   {"shape", std::move(dims)},
                            {"begin", begin}, {"end", end},       {"offset", offset}};
    }
    //! Throws tpipe::parse_error for a malformed entry (`where` names it).
    static named_range from_json(const json::value& v, const std::string& where)
    {
        named_range r;
        try {
            r.name = v.at("name").as_string("name");
            r.dtype = v.at("dtype").as_string("dtype");
            for (const auto& s : v.at("shape").as_array("shape")) r.shape.push_back(integer(s, "shape"));
            r.begin = integer(v.at("begin"), "begin");
            r.end = integer(v.at("end"), "end");
            r.offset = integer(v.at("offset"), "offset");
            dtype_bytes(r.dtype);
        } catch (const parse_error& e) {
            throw parse_error(where + ": " + e.what());
        }
        if (r.begin < 0 || r.end < r.begin || r.end > r.elements() || r.offset < 0)
            throw parse_error(where + ": range [" + std::to_string(r.begin) + ", " + std::to_string(r.end) +
                              ") at offset " + std::to_string(r.offset) + " does not fit tensor \"" + r.name +
                              "\" of " + std::to_string(r.elements()) + " elements");
        return r;
    }

private:
    static std::int64_t integer(const json::value& v, const char* what)
    {
        const double d = v.as_number(what);
        if (!(d >= 0 && d < 9.0e15) || d != static_cast<double>(static_cast<std::int64_t>(d)))
            throw parse_error(std::string(what) + " must be a non-negative integer");
        return static_cast<std::int64_t>(d);
    }
};

} // namespace tpipe::state
