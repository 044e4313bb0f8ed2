/** The Q4_1 format (not exported). */
package com.example.q4_1;
