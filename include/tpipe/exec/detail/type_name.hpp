#pragma once
// detail::portable_type_name<T>(): a name of a payload type that every compiler spells alike,
// for the runner's fingerprint (processes built by different compilers must agree on it) and its
// messages. typeid(T).name() is mangled differently per compiler ABI. Arithmetic types are named
// by kind and width, std::vector by its element, any other type by its size and alignment.
#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

namespace tpipe::detail {

template <class T>
struct type_name_of {
    static std::string get()
    {
        if constexpr (std::is_same_v<T, bool>) return "bool";
        else if constexpr (std::is_floating_point_v<T>) return "float" + std::to_string(sizeof(T) * 8);
        else if constexpr (std::is_integral_v<T>)
            return (std::is_signed_v<T> ? "int" : "uint") + std::to_string(sizeof(T) * 8);
        else
            return std::string(std::is_class_v<T> ? "class" : "type") + " of " + std::to_string(sizeof(T)) +
                   " bytes (alignment " + std::to_string(alignof(T)) + ")";
    }
};

template <class T, class A>
struct type_name_of<std::vector<T, A>> {
    static std::string get() { return "vector<" + type_name_of<T>::get() + ">"; }
};

template <class T>
std::string portable_type_name()
{
    return type_name_of<std::remove_cv_t<T>>::get();
}

} // namespace tpipe::detail
